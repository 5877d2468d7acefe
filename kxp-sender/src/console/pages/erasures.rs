//! Erasures by tag: the form (for a `manage` session), what it does said plainly before it is
//! pressed, and the account's erasures with who asked and how far each is.

use maud::{Markup, html};

use super::events::REFRESH_SECS;
use super::{Frame, Refresh, account_page_with};
use crate::model::rfc3339;
use crate::store::ErasureRow;

/// The erasures page; it refreshes itself while one is `running`.
pub(in crate::console) fn erasures(
    frame: &Frame<'_>,
    erasures: &[ErasureRow],
    running: bool,
) -> Markup {
    let main = html! {
        p { "Erase one customer's personal data: every event of this account carrying a tag "
            "(such as " code { "customer:cus_9" } ") loses its payload, wherever the server holds "
            "it — the event and the receivers' responses. The events keep their id, type and "
            "time, so your history still shows that something happened; their deliveries not "
            "made yet end " span.state.erased { "erased" } " and are never sent or replayed. "
            "Events accepted after the erasure are not touched." }
        @if frame.may_change {
            form.stack method="post" action=(frame.url("/erasures")) {
                (frame.csrf())
                label for="tag" { "Tag" }
                input #tag type="text" name="tag" required placeholder="customer:cus_9" autocomplete="off";
                button type="submit" { "Erase" }
            }
        } @else {
            p { "A read-only session cannot erase data." }
        }
        @if erasures.is_empty() {
            p { "No erasures yet." }
        } @else {
            table {
                caption { "Erasures, newest first" }
                thead { tr { th scope="col" { "Erasure" } th scope="col" { "Tag" } th scope="col" { "Status" }
                    th scope="col" { "Events" } th scope="col" { "By" } th scope="col" { "Asked" } th scope="col" { "Done" } } }
                tbody {
                    @for e in erasures {
                        tr {
                            td { code { (e.id) } }
                            td { code { (e.tag) } }
                            td { span class={ "state " (e.status) } { (e.status) } }
                            td { (e.events) }
                            td { (e.actor_kind) " " @if e.actor_name.is_empty() { code { (e.actor_id) } } @else { (e.actor_name) }
                                " (" (e.via) ")" }
                            td { (rfc3339(e.created_at)) }
                            td { @if let Some(at) = e.finished_at { (rfc3339(at)) } }
                        }
                    }
                }
            }
        }
    };
    let here = frame.url("/erasures");
    let refresh = running.then_some(Refresh {
        seconds: REFRESH_SECS,
        url: &here,
    });
    account_page_with(frame, "Erase personal data", main, refresh)
}

//! An endpoint's last 24 hours as a small inline SVG: one bar per clock hour, successes below
//! and failures stacked above, scaled to the busiest hour. Colours are SVG presentation
//! attributes (the CSP allows no inline style), and the chart says in words what it shows.

use maud::{Markup, html};

/// Width of one hour's bar, and the gap after it.
const BAR: i64 = 6;
const GAP: i64 = 2;
/// The chart's height.
const HEIGHT: i64 = 32;

/// The chart of `hours` (successes, failures), oldest first.
pub(super) fn hours(hours: &[(i64, i64)]) -> Markup {
    let busiest = hours.iter().map(|(s, f)| s + f).max().unwrap_or(0).max(1);
    let (successes, failures) = hours
        .iter()
        .fold((0, 0), |(s, f), (hs, hf)| (s + hs, f + hf));
    let width = i64::try_from(hours.len()).unwrap_or(0) * (BAR + GAP);
    let label = format!(
        "Last 24 hours, per hour: {successes} successful and {failures} failed attempts in all"
    );
    let scaled = |n: i64| (n * HEIGHT + busiest - 1) / busiest;
    html! {
        svg.chart role="img" aria-label=(label) width=(width) height=(HEIGHT)
            viewBox={ "0 0 " (width) " " (HEIGHT) } {
            title { (label) }
            @for (i, (ok, failed)) in hours.iter().enumerate() {
                @let x = i64::try_from(i).unwrap_or(0) * (BAR + GAP);
                @let ok_height = scaled(*ok);
                @let failed_height = scaled(*failed).min(HEIGHT - ok_height);
                @if *ok > 0 {
                    rect x=(x) y=(HEIGHT - ok_height) width=(BAR) height=(ok_height) fill="#2e7d32" {}
                }
                @if *failed > 0 {
                    rect x=(x) y=(HEIGHT - ok_height - failed_height) width=(BAR)
                        height=(failed_height) fill="#c62828" {}
                }
                @if ok + failed == 0 {
                    rect x=(x) y=(HEIGHT - 1) width=(BAR) height="1" fill="#8888" {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_hour_is_a_bar_scaled_to_the_busiest() {
        let svg = hours(&[(0, 0), (10, 0), (5, 5)]).into_string();
        assert!(svg.contains("15 successful and 5 failed"), "{svg}");
        // The busiest hour fills the height; an hour without attempts is a baseline.
        assert!(
            svg.contains(r##"y="0" width="6" height="32" fill="#2e7d32""##),
            "{svg}"
        );
        assert!(svg.contains(r##"height="1" fill="#8888""##), "{svg}");
        assert_eq!(svg.matches("<rect").count(), 4);
    }
}

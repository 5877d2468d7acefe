//! NATS subjects, as a NATS source's URL needs them: whether a subject is one a message can be
//! published to, whether a consumer's filter is well formed, and whether a filter matches a
//! subject under NATS's wildcard rules. The last is what keeps a source from consuming its own
//! rejects: each would come back to it, be rejected again and published again, forever.
//!
//! A subject is tokens separated by `.`, none empty. In a filter, a token that is exactly `*`
//! matches any one token, and a last token that is exactly `>` matches one or more tokens; a
//! `*` or `>` inside a longer token is an ordinary character, as NATS has it.

/// Whether `subject` can be published to: well formed, and no token is a wildcard.
pub(crate) fn is_literal(subject: &str) -> bool {
    well_formed(subject) && subject.split('.').all(|token| token != "*" && token != ">")
}

/// Whether `filter` is a well-formed filter: `>` is only ever its last token.
pub(crate) fn is_filter(filter: &str) -> bool {
    let mut tokens = filter.split('.').rev();
    tokens.next();
    well_formed(filter) && tokens.all(|token| token != ">")
}

/// Whether the subject `subject` is in `filter`. False when either is not well formed (NATS
/// refuses both; the URL's parser refuses them first).
pub(crate) fn matches(filter: &str, subject: &str) -> bool {
    if !is_filter(filter) || !is_literal(subject) {
        return false;
    }
    let mut subject = subject.split('.');
    for token in filter.split('.') {
        match (token, subject.next()) {
            (_, None) => return false,
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (literal, Some(given)) if literal == given => {}
            _ => return false,
        }
    }
    subject.next().is_none()
}

/// At least one token, none empty, and no white space (the URL's parser refuses it already;
/// NATS would take it for the end of the subject).
fn well_formed(text: &str) -> bool {
    text.split('.')
        .all(|token| !token.is_empty() && !token.contains(char::is_whitespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_match_subjects_by_nats_wildcard_rules() {
        let cases = [
            // Literal tokens: the whole subject, token by token.
            ("loop.rejected", "loop.rejected", true),
            ("loop.rejected", "loop.rejected.x", false),
            ("loop.rejected.x", "loop.rejected", false),
            ("loop", "loops", false),
            ("Loop.a", "loop.a", false),
            // `*`: exactly one token, anywhere.
            ("loop.*", "loop.rejected", true),
            ("loop.*", "loop", false),
            ("loop.*", "loop.a.b", false),
            ("*.rejected", "loop.rejected", true),
            ("*", "loop", true),
            ("*", "loop.rejected", false),
            ("loop.*.c", "loop.b.c", true),
            ("loop.*.c", "loop.b.d", false),
            // `>`: one or more trailing tokens, never none.
            ("loop.>", "loop.rejected", true),
            ("loop.>", "loop.a.b.c", true),
            ("loop.>", "loop", false),
            (">", "kxp.rejected.PAY", true),
            ("kxp.>", "kxp.rejected.PAY", true),
            ("kxp.*.PAY", "kxp.rejected.PAY", true),
            ("kxp.*.>", "kxp.rejected", false),
            ("kxp.*.>", "kxp.rejected.PAY", true),
            ("payments.events.>", "kxp.rejected.PAYMENTS", false),
            // A wildcard inside a token is an ordinary character.
            ("loop.re*", "loop.rejected", false),
            ("loop.re*", "loop.re*", true),
            ("loop.>x", "loop.a", false),
            // `>` not last: not a filter, so it matches nothing.
            ("loop.>.x", "loop.a.x", false),
            (">.x", "a.x", false),
            // Empty tokens, in the filter or the subject: not well formed.
            ("loop..x", "loop..x", false),
            ("loop.", "loop.", false),
            (".loop", ".loop", false),
            ("", "", false),
            ("loop.*", "loop.", false),
            ("loop.>", "loop..x", false),
            // A wildcard in the subject: not one a message can be published to.
            ("loop.*", "loop.*", false),
            ("loop.>", "loop.>", false),
        ];
        for (filter, subject, expected) in cases {
            assert_eq!(
                matches(filter, subject),
                expected,
                "{filter:?} against {subject:?}"
            );
        }
    }

    #[test]
    fn subjects_and_filters_are_told_apart() {
        for (text, literal, filter) in [
            ("kxp.rejected.PAY", true, true),
            ("payments.*.created", false, true),
            ("payments.>", false, true),
            (">", false, true),
            ("a.>.b", false, false),
            ("a..b", false, false),
            ("a.b.", false, false),
            ("", false, false),
            ("a b", false, false),
            ("a*.b>", true, true),
        ] {
            assert_eq!(is_literal(text), literal, "is_literal({text:?})");
            assert_eq!(is_filter(text), filter, "is_filter({text:?})");
        }
    }
}

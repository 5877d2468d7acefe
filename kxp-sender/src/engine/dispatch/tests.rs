use super::*;
use time::macros::datetime;

const NOW: time::OffsetDateTime = datetime!(1994-11-06 08:49:00 UTC);

fn after(value: &str) -> Option<Duration> {
    retry_after_from(value, NOW)
}

#[test]
fn seconds() {
    assert_eq!(after("120"), Some(Duration::from_secs(120)));
    assert_eq!(after(" 0 "), Some(Duration::ZERO));
}

#[test]
fn an_http_date_in_each_form_is_a_delay_from_now() {
    let delay = Some(Duration::from_secs(37));
    assert_eq!(after("Sun, 06 Nov 1994 08:49:37 GMT"), delay, "IMF-fixdate");
    assert_eq!(after("Sunday, 06-Nov-94 08:49:37 GMT"), delay, "RFC 850");
    assert_eq!(after("Sun Nov  6 08:49:37 1994"), delay, "asctime");
    assert_eq!(
        after("Mon, 07 Nov 1994 08:49:00 GMT"),
        Some(Duration::from_secs(24 * 60 * 60))
    );
}

#[test]
fn a_date_in_the_past_asks_for_no_delay() {
    assert_eq!(after("Sun, 06 Nov 1994 08:48:59 GMT"), Some(Duration::ZERO));
    assert_eq!(after("Thu, 01 Jan 1970 00:00:00 GMT"), Some(Duration::ZERO));
}

#[test]
fn a_far_date_is_returned_whole_for_the_schedule_to_cap() {
    let delay = after("Fri, 31 Dec 9999 23:59:59 GMT").unwrap();
    assert!(delay > crate::policy::schedule::MAX_RETRY_AFTER);
}

#[test]
fn rfc850_two_digit_years_are_never_more_than_50_years_ahead() {
    // From 1994: 44 is 2044 (50 years ahead), 45 is 1945.
    assert_eq!(
        http_date("Monday, 01-Jan-44 00:00:00 GMT", NOW),
        Some(datetime!(2044-01-01 00:00:00 UTC))
    );
    assert_eq!(
        http_date("Monday, 01-Jan-45 00:00:00 GMT", NOW),
        Some(datetime!(1945-01-01 00:00:00 UTC))
    );
}

#[test]
fn garbage_is_ignored() {
    for value in [
        "",
        "soon",
        "-5",
        "1.5",
        "18446744073709551616",
        "Sun, 06 Nov 1994 08:49:37",
        "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 06 Nov 1994 08:49:37 +0000",
        "sun, 06 nov 1994 08:49:37 gmt",
        "Sun, 31 Feb 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 25:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 GMT trailing",
        "Sunday, 06-Nov-94 08:49:37 GMT trailing",
        "1994-11-06T08:49:37Z",
    ] {
        assert_eq!(after(value), None, "{value:?}");
    }
}

//! The envelope can be parsed only from a verified body, and bad envelopes are named precisely.

use kxp_verify::{EnvelopeErrorKind, Event, Secret, Signer, Verifier};

const SECRET: &str = "41ab92590637ac82026ca65266b2898428ea491b1e6d543d7202cf486ea62965";
const NOW: u64 = 1_764_464_523;

fn parse<T: serde::de::DeserializeOwned>(
    body: &[u8],
) -> Result<Event<T>, kxp_verify::EnvelopeError> {
    let header = Signer::new(Secret::new(SECRET).unwrap())
        .sign(NOW, body)
        .to_string();
    let verifier = Verifier::new(Secret::new(SECRET).unwrap());
    verifier.verify(&header, body, NOW).unwrap().parse()
}

#[test]
fn parses_every_field_and_ignores_unknown_ones() {
    let body = br#"{"id":"5f0c6a52-3d2e-4c1f-9a51-8e2b7f1d9c01","type":"payment.succeeded",
        "api_version":"2026-11-01","created_at":"2026-11-30T01:02:03Z",
        "data":{"amount":1999,"currency":"CNY"},"added_later":true}"#;
    let event: Event = parse(body).unwrap();
    assert_eq!(event.id(), "5f0c6a52-3d2e-4c1f-9a51-8e2b7f1d9c01");
    assert_eq!(event.event_type(), "payment.succeeded");
    assert_eq!(event.api_version(), "2026-11-01");
    assert_eq!(event.created_at(), "2026-11-30T01:02:03Z");
    assert_eq!(event.data()["currency"], "CNY");
}

#[test]
fn typed_data() {
    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Payment {
        amount: u64,
    }
    let body = br#"{"id":"e1","type":"t","api_version":"v","created_at":"c","data":{"amount":5}}"#;
    let event: Event<Payment> = parse(body).unwrap();
    assert_eq!(event.into_data(), Payment { amount: 5 });
}

#[test]
fn names_what_is_wrong_without_quoting_the_body() {
    let not_json = parse::<serde_json::Value>(b"card=4111111111111111").unwrap_err();
    assert_eq!(not_json.kind(), EnvelopeErrorKind::InvalidJson);
    assert!(!not_json.to_string().contains("4111"), "{not_json}");

    let no_id =
        parse::<serde_json::Value>(br#"{"type":"t","api_version":"v","created_at":"c","data":{}}"#)
            .unwrap_err();
    assert_eq!(no_id.kind(), EnvelopeErrorKind::InvalidEnvelope);
    assert_eq!(no_id.to_string(), "invalid_envelope: missing field `id`");

    let wrong_type = parse::<u32>(
        br#"{"id":"e","type":"t","api_version":"v","created_at":"c","data":"4111111111111111"}"#,
    )
    .unwrap_err();
    assert_eq!(wrong_type.kind(), EnvelopeErrorKind::InvalidEnvelope);
    assert!(!wrong_type.to_string().contains("4111"), "{wrong_type}");
}

#[test]
fn refuses_ids_that_cannot_be_dedup_keys() {
    let long = "x".repeat(256);
    for id in ["", "has space", "tab\t", long.as_str()] {
        let body = serde_json::json!({"id": id, "type": "t", "api_version": "v", "created_at": "c", "data": {}});
        let error = parse::<serde_json::Value>(body.to_string().as_bytes()).unwrap_err();
        assert_eq!(
            error.kind(),
            EnvelopeErrorKind::InvalidEnvelope,
            "id {id:?}"
        );
    }
    let max = "x".repeat(255);
    let body = serde_json::json!({"id": max, "type": "t", "api_version": "v", "created_at": "c", "data": {}});
    assert!(parse::<serde_json::Value>(body.to_string().as_bytes()).is_ok());
}

#[test]
fn sender_side_events_serialize_to_the_wire_form() {
    let event = Event::new(
        "e1",
        "payment.succeeded",
        "2026-11-01",
        "2026-11-30T01:02:03Z",
        7,
    );
    let json = serde_json::to_value(&event).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"id":"e1","type":"payment.succeeded","api_version":"2026-11-01",
            "created_at":"2026-11-30T01:02:03Z","data":7})
    );
}

#[test]
fn only_a_utf8_json_object_is_an_event() {
    // Found by fuzzing: serde accepts an array for a struct, and skips unknown fields unchecked.
    let array = br#"["evt_1","payment.succeeded","2026-11-01","2026-11-30T01:02:03Z",{}]"#;
    assert_eq!(
        parse::<serde_json::Value>(array).unwrap_err().kind(),
        EnvelopeErrorKind::InvalidEnvelope
    );
    let mut invalid_utf8 =
        br#"{"id":"e","type":"t","api_version":"v","created_at":"c","data":{},"x":""#.to_vec();
    invalid_utf8.extend_from_slice(&[0xff, 0xfe, b'"', b'}']);
    assert_eq!(
        parse::<serde_json::Value>(&invalid_utf8)
            .unwrap_err()
            .kind(),
        EnvelopeErrorKind::InvalidJson
    );
    let padded = b"  \n {\"id\":\"e\",\"type\":\"t\",\"api_version\":\"v\",\"created_at\":\"c\",\"data\":{}}";
    assert!(parse::<serde_json::Value>(padded).is_ok());
}

#[test]
fn the_borrowed_envelope_reads_what_parse_reads_and_copies_only_escapes() {
    let bodies: [&[u8]; 5] = [
        br#"{"id":"evt_1","type":"payment.succeeded","api_version":"2026-11-01","created_at":"c","data":{"a":[1,2]},"later":1}"#,
        br#"{"id":"evt_\u0031","type":"t\n","api_version":"v","created_at":"c","data":null}"#,
        br#"{"type":"t","api_version":"v","created_at":"c","data":{}}"#,
        br#"{"id":"e","type":"t","api_version":"v","created_at":"c","data":{"a":}}"#,
        br#"["e","t","v","c",{}]"#,
    ];
    for body in bodies {
        let header = Signer::new(Secret::new(SECRET).unwrap())
            .sign(NOW, body)
            .to_string();
        let verifier = Verifier::new(Secret::new(SECRET).unwrap());
        let verified = verifier.verify(&header, body, NOW).unwrap();
        let event = verified.parse::<serde::de::IgnoredAny>();
        match (verified.envelope(), event) {
            (Ok(envelope), Ok(event)) => {
                assert_eq!(envelope.id(), event.id());
                assert_eq!(envelope.event_type(), event.event_type());
                assert_eq!(envelope.api_version(), event.api_version());
                assert_eq!(envelope.created_at(), event.created_at());
            }
            (Err(a), Err(b)) => assert_eq!(a, b),
            (a, b) => panic!("envelope {a:?}, parse {b:?}"),
        }
    }

    // Borrowed from the body unless an escape had to be decoded.
    let body = br#"{"id":"evt_\u0031","type":"plain","api_version":"v","created_at":"c","data":0}"#;
    let header = Signer::new(Secret::new(SECRET).unwrap())
        .sign(NOW, body)
        .to_string();
    let verifier = Verifier::new(Secret::new(SECRET).unwrap());
    let verified = verifier.verify(&header, body, NOW).unwrap();
    let envelope = verified.envelope().unwrap();
    assert_eq!(envelope.id(), "evt_1");
    let body_range = body.as_ptr_range();
    let borrowed = |s: &str| body_range.contains(&s.as_ptr());
    assert!(borrowed(envelope.event_type()), "`type` was copied");
    assert!(
        !borrowed(envelope.id()),
        "the unescaped id cannot point into the body"
    );
}

#[test]
fn only_a_thin_notice_may_leave_out_data_and_it_never_parses_as_an_event() {
    let verify = |body: &[u8]| {
        let header = Signer::new(Secret::new(SECRET).unwrap())
            .sign(NOW, body)
            .to_string();
        let verifier = Verifier::new(Secret::new(SECRET).unwrap());
        let verified = verifier.verify(&header, body, NOW).unwrap();
        (
            verified.envelope().map(|e| e.id().to_owned()),
            verified
                .parse::<serde_json::Value>()
                .map(|e| e.id().to_owned()),
        )
    };
    let thin = br#"{"id":"e","type":"t","api_version":"v","created_at":"c","thin":true}"#;
    let (envelope, parsed) = verify(thin);
    assert_eq!(envelope, Ok("e".to_owned()));
    assert!(parsed.is_err());
    for body in [
        &br#"{"id":"e","type":"t","api_version":"v","created_at":"c","thin":false}"#[..],
        br#"{"id":"e","type":"t","api_version":"v","created_at":"c"}"#,
    ] {
        let (envelope, parsed) = verify(body);
        let error = envelope.unwrap_err();
        assert_eq!(error.kind(), EnvelopeErrorKind::InvalidEnvelope);
        // The same error as `parse`, position included: the fuzz target holds them to it.
        assert_eq!(Err(error), parsed);
    }
    // Found by the fuzz target: an event without `data` and with trailing bytes is refused
    // for the missing field by both (serde finds it before the trailing bytes), and `thin`
    // with data, or of another type, is just an unknown field of a full event.
    let (envelope, parsed) =
        verify(br#"{"id":"e","type":"t","api_version":"v","created_at":"c","daTa":{}}}"#);
    assert_eq!(envelope, parsed);
    assert_eq!(
        envelope.unwrap_err().to_string(),
        "invalid_envelope: missing field `data`"
    );
    for body in [
        &br#"{"id":"e","type":"t","api_version":"v","created_at":"c","data":{},"thin":true}"#[..],
        br#"{"id":"e","type":"t","api_version":"v","created_at":"c","data":{},"thin":"yes"}"#,
        br#"{"id":"e","type":"t","api_version":"v","created_at":"c","data":{},"thin":1,"thin":2}"#,
    ] {
        let (envelope, parsed) = verify(body);
        assert_eq!(envelope, Ok("e".to_owned()));
        assert_eq!(parsed, Ok("e".to_owned()));
    }
}

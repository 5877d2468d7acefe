//! Sealing and opening, key rings and their parsing, checked with fixed keys and with random
//! values: nothing here touches a database.

use super::*;

// Fixed keys, so the tests can assert their base64 never reaches a message.
const OLD: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const NEW: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
const CONTEXT: &[u8] = b"kxp/endpoint-secret/ep_1";

fn ring(value: &str) -> KeyRing {
    KeyRing::parse(value).unwrap()
}

fn old_ring() -> KeyRing {
    ring(&format!("k1:{OLD}"))
}

fn parse_err(value: &str) -> KeyRingError {
    KeyRing::parse(value).unwrap_err()
}

/// The decoded body of a sealed value, changed by `change`, encoded back.
fn with_body(sealed: &str, change: impl FnOnce(&mut Vec<u8>)) -> String {
    let (id, body) = split_sealed(sealed).unwrap();
    let mut bytes = URL_SAFE_NO_PAD.decode(body).unwrap();
    change(&mut bytes);
    format!("{SEALED_PREFIX}{id}.{}", URL_SAFE_NO_PAD.encode(&bytes))
}

#[test]
fn derived_keys_follow_the_newest_key_and_differ_by_label() {
    let label = "kxp/test/v1";
    let key = old_ring().derive(label);
    assert_eq!(
        *key,
        *old_ring().derive(label),
        "the same from every process"
    );
    assert_ne!(*key, *old_ring().derive("kxp/other/v1"));
    assert_ne!(
        &key[..],
        &KEY_BASE64.decode(OLD).unwrap()[..],
        "not the key itself"
    );
    // An older key does not count: the newest derives.
    let rotated = ring(&format!("k2:{NEW},k1:{OLD}"));
    assert_ne!(*key, *rotated.derive(label));
    assert_eq!(*key, *ring(&format!("k1:{OLD},k2:{NEW}")).derive(label));
}

#[test]
fn sealed_values_open_to_the_plaintext() {
    let ring = old_ring();
    for plaintext in [&b""[..], b"s", &[0xff; 64], b"whsec_0123456789abcdef"] {
        let sealed = ring.seal(plaintext, CONTEXT);
        assert_eq!(*ring.open(&sealed, CONTEXT).unwrap(), plaintext);
        assert_eq!(
            *open_stored(Some(&ring), &sealed, CONTEXT).unwrap(),
            plaintext
        );
    }
}

#[test]
fn the_stored_form_is_versioned_names_its_key_and_never_repeats() {
    let ring = old_ring();
    let a = ring.seal(b"secret", CONTEXT);
    let b = ring.seal(b"secret", CONTEXT);
    assert_ne!(a, b, "a fresh nonce each time");
    let body = a.strip_prefix("kxps1.k1.").unwrap();
    let decoded = URL_SAFE_NO_PAD.decode(body).unwrap();
    assert_eq!(decoded.len(), NONCE_LEN + b"secret".len() + TAG_LEN);
    assert!(!a.contains(',') && !a.contains('='), "{a}");
    assert!(!a.contains("secret"));
    assert_eq!(Stored::of(&a).key_id(), Some("k1"));
    assert_eq!(format!("{:?}", Stored::of(&a)), "Sealed(k1)");
}

#[test]
fn a_value_copied_to_another_row_is_refused() {
    let ring = old_ring();
    let sealed = ring.seal(b"secret", CONTEXT);
    let err = ring.open(&sealed, b"kxp/endpoint-secret/ep_2").unwrap_err();
    assert_eq!(err.as_str(), "authentication_failed");
    assert!(ring.open(&sealed, b"").is_err());
}

#[test]
fn any_altered_byte_is_refused() {
    let ring = old_ring();
    let sealed = ring.seal(b"secret", CONTEXT);
    for at in 0..NONCE_LEN + 6 + TAG_LEN {
        let tampered = with_body(&sealed, |bytes| bytes[at] ^= 0x01);
        assert_eq!(
            ring.open(&tampered, CONTEXT),
            Err(OpenError::AuthenticationFailed {
                key_id: "k1".into()
            }),
            "byte {at}"
        );
    }
    // A tag cut short, or bytes added, fail too.
    let longer = with_body(&sealed, |bytes| bytes.push(0));
    assert_eq!(
        ring.open(&longer, CONTEXT).unwrap_err().as_str(),
        "authentication_failed"
    );
    let shorter = with_body(&sealed, |bytes| bytes.truncate(NONCE_LEN + TAG_LEN - 1));
    assert_eq!(ring.open(&shorter, CONTEXT), Err(OpenError::Malformed));
}

#[test]
fn malformed_sealed_values_are_refused_without_a_key_lookup() {
    let ring = old_ring();
    let body = URL_SAFE_NO_PAD.encode([0u8; NONCE_LEN + TAG_LEN]);
    for bad in [
        "kxps1.".to_owned(),
        "kxps1.k1".to_owned(),
        "kxps1.k1.".to_owned(),
        format!("kxps1..{body}"),
        format!("kxps1.K1.{body}"),
        format!("kxps1.k1.{body}="),
        format!("kxps1.k1.{body}!"),
        format!("kxps1.nope.{}", URL_SAFE_NO_PAD.encode([0u8; 8])),
    ] {
        assert_eq!(ring.open(&bad, CONTEXT), Err(OpenError::Malformed), "{bad}");
        assert_eq!(
            open_stored(None, &bad, CONTEXT).unwrap_err().as_str(),
            "malformed"
        );
    }
}

#[test]
fn an_unknown_key_id_is_named() {
    let sealed = ring(&format!("k2:{NEW}")).seal(b"secret", CONTEXT);
    let err = old_ring().open(&sealed, CONTEXT).unwrap_err();
    assert_eq!(
        err,
        OpenError::UnknownKey {
            key_id: "k2".into()
        }
    );
    assert!(err.to_string().contains("`k2`"), "{err}");
}

#[test]
fn a_server_without_a_key_names_the_key_a_sealed_value_needs() {
    let sealed = old_ring().seal(b"secret", CONTEXT);
    let err = open_stored(None, &sealed, CONTEXT).unwrap_err();
    assert_eq!(
        err,
        OpenError::NoKeyConfigured {
            key_id: "k1".into()
        }
    );
    assert!(err.to_string().contains("KXP_SECRETS_KEY"), "{err}");
    assert!(err.to_string().contains("`k1`"), "{err}");
}

#[test]
fn legacy_plaintext_passes_through_and_is_resealed() {
    let ring = old_ring();
    let plain = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    assert_eq!(
        *open_stored(None, plain, CONTEXT).unwrap(),
        plain.as_bytes()
    );
    assert_eq!(
        *open_stored(Some(&ring), plain, CONTEXT).unwrap(),
        plain.as_bytes()
    );
    assert_eq!(ring.open(plain, CONTEXT), Err(OpenError::NotSealed));
    assert_eq!(Stored::of(plain), Stored::Plain(plain));
    assert_eq!(Stored::of(plain).key_id(), None);
    assert_eq!(format!("{:?}", Stored::of(plain)), "Plain([redacted])");
    assert!(ring.needs_reseal(plain));
    let resealed = ring.reseal(plain, CONTEXT).unwrap().unwrap();
    assert!(!ring.needs_reseal(&resealed));
    assert_eq!(*ring.open(&resealed, CONTEXT).unwrap(), plain.as_bytes());
    assert_eq!(*to_stored(None, plain, CONTEXT), plain);
    let stored = to_stored(Some(&ring), plain, CONTEXT);
    assert_eq!(*ring.open(&stored, CONTEXT).unwrap(), plain.as_bytes());
}

#[test]
fn rotation_opens_with_the_old_key_and_reseals_under_the_new() {
    let sealed = old_ring().seal(b"secret", CONTEXT);
    let both = ring(&format!("k2:{NEW}, k1:{OLD}"));
    assert_eq!(both.sealing_key_id(), "k2");
    assert_eq!(both.key_ids().collect::<Vec<_>>(), ["k2", "k1"]);
    assert_eq!(*both.open(&sealed, CONTEXT).unwrap(), b"secret");
    assert!(both.needs_reseal(&sealed));
    let resealed = both.reseal(&sealed, CONTEXT).unwrap().unwrap();
    assert_eq!(Stored::of(&resealed).key_id(), Some("k2"));
    assert!(!both.needs_reseal(&resealed));
    assert_eq!(both.reseal(&resealed, CONTEXT), Ok(None));
    // The old key can now go.
    let new_only = ring(&format!("k2:{NEW}"));
    assert_eq!(*new_only.open(&resealed, CONTEXT).unwrap(), b"secret");
    assert_eq!(
        new_only.open(&sealed, CONTEXT).unwrap_err().as_str(),
        "unknown_key"
    );
    // A re-seal needs the value's context: a copied row stays refused.
    assert!(both.reseal(&sealed, b"kxp/endpoint-secret/ep_2").is_err());
}

#[test]
fn a_different_key_under_a_known_id_fails_authentication() {
    let sealed = old_ring().seal(b"secret", CONTEXT);
    let impostor = ring(&format!("k1:{NEW}"));
    assert_eq!(
        impostor.open(&sealed, CONTEXT).unwrap_err().as_str(),
        "authentication_failed"
    );
}

#[test]
fn key_rings_parse_with_spaces_and_with_or_without_padding() {
    let unpadded = OLD.trim_end_matches('=');
    let ring = ring(&format!(" k-2026:{NEW} ,\n a1:{unpadded}\n"));
    assert_eq!(ring.key_ids().collect::<Vec<_>>(), ["k-2026", "a1"]);
    assert_eq!(
        format!("{ring:?}"),
        r#"KeyRing { key_ids: ["k-2026", "a1"] }"#
    );
    let sixteen = "a".repeat(16);
    assert!(KeyRing::parse(&format!("{sixteen}:{OLD}")).is_ok());
    assert!(format!("{sixteen}:{OLD}").parse::<KeyRing>().is_ok());
}

#[test]
fn bad_key_rings_are_refused_by_name() {
    let short = STANDARD.encode([7u8; 16]);
    let long = STANDARD.encode([7u8; 33]);
    let cases = [
        (String::new(), "empty"),
        (" \n".to_owned(), "empty"),
        (format!("k1:{OLD},"), "empty_entry"),
        (format!(",k1:{OLD}"), "empty_entry"),
        (format!("k2:{NEW},,k1:{OLD}"), "empty_entry"),
        (OLD.to_owned(), "missing_key_id"),
        (format!(":{OLD}"), "invalid_key_id"),
        (format!("K1:{OLD}"), "invalid_key_id"),
        (format!("k.1:{OLD}"), "invalid_key_id"),
        (format!("{}:{OLD}", "a".repeat(17)), "invalid_key_id"),
        (format!("k1:{NEW},k1:{OLD}"), "duplicate_key_id"),
        ("k1:not base64!".to_owned(), "invalid_base64"),
        (
            format!("k1:{}", URL_SAFE_NO_PAD.encode([0xfb; 32])),
            "invalid_base64",
        ),
        ("k1:".to_owned(), "wrong_key_length"),
        (format!("k1:{short}"), "wrong_key_length"),
        (format!("k1:{long}"), "wrong_key_length"),
    ];
    for (value, name) in cases {
        assert_eq!(parse_err(&value).as_str(), name, "{value:?}");
    }
    assert_eq!(
        parse_err(&format!("k1:{short}")),
        KeyRingError::WrongKeyLength {
            id: "k1".into(),
            bytes: 16
        }
    );
    assert_eq!(
        parse_err(&format!("k2:{NEW},k1:{OLD},")),
        KeyRingError::EmptyEntry { position: 3 }
    );
}

#[test]
fn no_message_or_debug_output_shows_key_material() {
    let ring = ring(&format!("k2:{NEW},k1:{OLD}"));
    let sealed = ring.seal(b"the plaintext", CONTEXT);
    let mut shown = vec![format!("{ring:?}"), format!("{:?}", ring.clone())];
    for value in [
        format!("{OLD}:{NEW}"),
        format!("{NEW}:"),
        format!("k1:{NEW},{OLD}"),
        format!("k1:{NEW},k1:{OLD}"),
        format!("k1:{}x", &NEW[..43]),
        format!("k1:{}", &NEW[..20]),
    ] {
        let err = parse_err(&value);
        shown.push(err.to_string());
        shown.push(format!("{err:?}"));
    }
    for err in [
        old_ring()
            .open(&with_body(&sealed, |b| b[30] ^= 1), CONTEXT)
            .unwrap_err(),
        open_stored(None, &sealed, CONTEXT).unwrap_err(),
        KeyRing::parse(&format!("k9:{OLD}"))
            .unwrap()
            .open(&sealed, CONTEXT)
            .unwrap_err(),
    ] {
        shown.push(err.to_string());
        shown.push(format!("{err:?}"));
    }
    let unpadded = [OLD, NEW].map(|key| key.trim_end_matches('=').to_owned());
    for text in &shown {
        for key in &unpadded {
            assert!(!text.contains(&key[..20]), "{text}");
        }
        assert!(!text.contains("the plaintext"), "{text}");
    }
}

#[test]
fn generated_key_lines_parse_and_differ() {
    let a = generate_key_line();
    let b = generate_key_line();
    assert_ne!(*a, *b);
    let ring = KeyRing::parse(&a).unwrap();
    let id = ring.sealing_key_id();
    assert_eq!(id.len(), 14, "{id}");
    assert!(id.starts_with("k20") && id.as_bytes()[9] == b'-', "{id}");
    let both = KeyRing::parse(&format!("{},{}", *b, *a)).unwrap();
    let sealed = ring.seal(b"secret", CONTEXT);
    assert_eq!(*both.open(&sealed, CONTEXT).unwrap(), b"secret");
}

#[test]
fn key_lines_name_the_day_they_were_made() {
    let date = time::Date::from_calendar_date(2026, time::Month::March, 7).unwrap();
    let mut random = [0u8; KEY_LEN + 2];
    random[KEY_LEN..].copy_from_slice(&[0xab, 0x01]);
    assert_eq!(
        *key_line(date, &random),
        format!("k20260307-ab01:{}", STANDARD.encode([0u8; 32]))
    );
}

#[test]
fn random_plaintexts_and_contexts_round_trip() {
    // proptest is not a dev-dependency of this crate: a loop over OS-random inputs instead.
    let ring = ring(&format!("k2:{NEW},k1:{OLD}"));
    for round in 0..200 {
        let mut input = [0u8; 96];
        getrandom::fill(&mut input).unwrap();
        let (plaintext, context) = input.split_at(usize::from(input[0]) % 64 + round % 2);
        let sealed = ring.seal(plaintext, context);
        assert_eq!(*ring.open(&sealed, context).unwrap(), plaintext);
        assert!(ring.open(&sealed, &[context, b"x"].concat()).is_err());
    }
}

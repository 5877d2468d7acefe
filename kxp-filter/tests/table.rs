//! The semantics as a table: every operator, missing fields, type mismatches and arrays, each
//! filter against the same events, with the events it must take.

use kxp_filter::{Event, Filter, FilterErrorKind};
use serde_json::{Value, json};

struct Sample {
    name: &'static str,
    event_type: &'static str,
    data: Value,
    tags: Vec<String>,
}

fn samples() -> Vec<Sample> {
    let tags = |t: &[&str]| t.iter().map(|s| (*s).to_owned()).collect();
    vec![
        Sample {
            name: "big_fr",
            event_type: "payment.succeeded",
            data: json!({"amount": 25000, "currency": "EUR", "customer": {"country": "FR"},
                         "items": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}],
                         "risk": 0.25, "note": null, "live": true}),
            tags: tags(&["vip", "eu"]),
        },
        Sample {
            name: "small_de",
            event_type: "payment.succeeded",
            data: json!({"amount": 500, "currency": "EUR", "customer": {"country": "DE"},
                         "items": [{"sku": "C-3", "qty": 5}], "risk": 0.9, "live": false}),
            tags: tags(&["eu"]),
        },
        Sample {
            name: "refund_us",
            event_type: "refund.created",
            data: json!({"amount": 25000.0, "currency": "USD", "customer": {"country": "US"},
                         "items": [], "live": true}),
            tags: vec![],
        },
        Sample {
            // A string where the others have numbers: every numeric test is no match.
            name: "odd_types",
            event_type: "payment.failed",
            data: json!({"amount": "25000", "customer": "someone", "items": "none",
                         "risk": [0.1, 0.95], "live": "yes"}),
            tags: tags(&["test"]),
        },
        Sample {
            name: "bare",
            event_type: "ping",
            data: json!({"grid": [[1, 2], [3]]}),
            tags: vec![],
        },
        Sample {
            // Integers past 2^53, where a float comparison would call them equal.
            name: "huge",
            event_type: "payment.succeeded",
            data: json!({"amount": 9007199254740993u64}),
            tags: vec![],
        },
    ]
}

/// Each filter and the samples it takes.
fn table() -> Vec<(Value, &'static [&'static str])> {
    vec![
        // Everything.
        (
            json!({}),
            &[
                "big_fr",
                "small_de",
                "refund_us",
                "odd_types",
                "bare",
                "huge",
            ],
        ),
        // Equality by literal and by $eq; numbers by value (25000 == 25000.0), not by kind
        // of text ("25000" is a string).
        (json!({"data.amount": 25000}), &["big_fr", "refund_us"]),
        (
            json!({"data.amount": {"$eq": 25000.0}}),
            &["big_fr", "refund_us"],
        ),
        (json!({"data.amount": "25000"}), &["odd_types"]),
        (json!({"type": "ping"}), &["bare"]),
        (json!({"data.live": true}), &["big_fr", "refund_us"]),
        (json!({"data.note": null}), &["big_fr"]),
        // $ne: the negation of $eq, so a missing field and another kind both match.
        (
            json!({"data.currency": {"$ne": "EUR"}}),
            &["refund_us", "odd_types", "bare", "huge"],
        ),
        (
            json!({"data.note": {"$ne": null}}),
            &["small_de", "refund_us", "odd_types", "bare", "huge"],
        ),
        // Order: numbers numerically, integers exactly, a string is never a number.
        (
            json!({"data.amount": {"$gt": 500}}),
            &["big_fr", "refund_us", "huge"],
        ),
        (
            json!({"data.amount": {"$gte": 500}}),
            &["big_fr", "small_de", "refund_us", "huge"],
        ),
        (json!({"data.amount": {"$lt": 25000}}), &["small_de"]),
        (
            json!({"data.amount": {"$lte": 25000}}),
            &["big_fr", "small_de", "refund_us"],
        ),
        (
            json!({"data.amount": {"$gt": 9007199254740992u64}}),
            &["huge"],
        ),
        (
            json!({"data.amount": {"$gt": 9007199254740992.0}}),
            &["huge"],
        ),
        (
            json!({"data.amount": {"$gt": 499.5, "$lt": 500.5}}),
            &["small_de"],
        ),
        (
            json!({"data.risk": {"$gte": 0.9}}),
            &["small_de", "odd_types"],
        ),
        // Strings bytewise: "B" < "a", and "25000" (a string) against a string bound.
        (
            json!({"data.customer.country": {"$lt": "E"}}),
            &["small_de"],
        ),
        (json!({"data.amount": {"$gt": "2"}}), &["odd_types"]),
        (json!({"type": {"$gte": "refund"}}), &["refund_us"]),
        // $in and $nin.
        (
            json!({"data.customer.country": {"$in": ["DE", "FR"]}}),
            &["big_fr", "small_de"],
        ),
        (
            json!({"data.customer.country": {"$nin": ["DE", "FR"]}}),
            &["refund_us", "odd_types", "bare", "huge"],
        ),
        (
            json!({"data.amount": {"$in": [500, "25000"]}}),
            &["small_de", "odd_types"],
        ),
        (json!({"type": {"$in": []}}), &[]),
        // $in's values by value too (25000.0 is 25000), every kind; $ne and $nin across kinds
        // are negations, so another kind matches them.
        (
            json!({"data.amount": {"$in": [25000.0, true, null]}}),
            &["big_fr", "refund_us"],
        ),
        (
            json!({"data.live": {"$in": [false, "yes"]}}),
            &["small_de", "odd_types"],
        ),
        (json!({"data.note": {"$in": [null]}}), &["big_fr"]),
        (
            json!({"data.risk": {"$in": [0.1, 0.25]}}),
            &["big_fr", "odd_types"],
        ),
        (
            json!({"data.amount": {"$ne": 25000}}),
            &["small_de", "odd_types", "bare", "huge"],
        ),
        (
            json!({"data.amount": {"$nin": ["25000", 500]}}),
            &["big_fr", "refund_us", "bare", "huge"],
        ),
        // Arrays within arrays are not opened.
        (json!({"data.grid": 1}), &[]),
        (json!({"data.grid": {"$exists": true}}), &["bare"]),
        // $exists: null counts as there; an empty array is there.
        (json!({"data.note": {"$exists": true}}), &["big_fr"]),
        (
            json!({"data.note": {"$exists": false}}),
            &["small_de", "refund_us", "odd_types", "bare", "huge"],
        ),
        (
            json!({"data.items": {"$exists": true}}),
            &["big_fr", "small_de", "refund_us", "odd_types"],
        ),
        (
            json!({"data.customer.country": {"$exists": true}}),
            &["big_fr", "small_de", "refund_us"],
        ),
        // $prefix, on strings only.
        (
            json!({"type": {"$prefix": "payment."}}),
            &["big_fr", "small_de", "odd_types", "huge"],
        ),
        (json!({"data.amount": {"$prefix": "25"}}), &["odd_types"]),
        // Arrays: any element; a path through an array of objects reaches each.
        (json!({"tags": "eu"}), &["big_fr", "small_de"]),
        (
            json!({"tags": {"$ne": "eu"}}),
            &["refund_us", "odd_types", "bare", "huge"],
        ),
        (
            json!({"tags": {"$in": ["vip", "test"]}}),
            &["big_fr", "odd_types"],
        ),
        // An event without tags has none: `$exists: false` takes the untagged.
        (
            json!({"tags": {"$exists": true}}),
            &["big_fr", "small_de", "odd_types"],
        ),
        (
            json!({"tags": {"$exists": false}}),
            &["refund_us", "bare", "huge"],
        ),
        (json!({"data.items.sku": "B-7"}), &["big_fr"]),
        (json!({"data.items.qty": {"$gte": 5}}), &["small_de"]),
        (
            json!({"data.items.sku": {"$exists": true}}),
            &["big_fr", "small_de"],
        ),
        (
            json!({"data.risk": {"$gt": 0.5}}),
            &["small_de", "odd_types"],
        ),
        // Several keys, $and, $or, $not.
        (
            json!({"type": {"$prefix": "payment."}, "data.currency": "EUR"}),
            &["big_fr", "small_de"],
        ),
        (
            json!({"$and": [{"data.currency": "EUR"}, {"data.amount": {"$gt": 1000}}]}),
            &["big_fr"],
        ),
        (
            json!({"$or": [{"data.customer.country": "US"}, {"tags": "test"}]}),
            &["refund_us", "odd_types"],
        ),
        (
            json!({"$not": {"type": {"$prefix": "payment."}}}),
            &["refund_us", "bare"],
        ),
        (
            json!({"$not": {"data.amount": {"$exists": true}}}),
            &["bare"],
        ),
        (
            json!({"$or": [{"$and": [{"data.live": true}, {"data.amount": {"$gte": 25000}}]}, {"type": "ping"}]}),
            &["big_fr", "refund_us", "bare"],
        ),
        // The other envelope fields.
        (
            json!({"api_version": "2026-01-01"}),
            &[
                "big_fr",
                "small_de",
                "refund_us",
                "odd_types",
                "bare",
                "huge",
            ],
        ),
        (
            json!({"created_at": {"$gte": "2026-12-05T00:00:00Z"}}),
            &[
                "big_fr",
                "small_de",
                "refund_us",
                "odd_types",
                "bare",
                "huge",
            ],
        ),
        (json!({"id": {"$prefix": "evt_big"}}), &["big_fr"]),
    ]
}

#[test]
fn every_filter_takes_exactly_its_events() {
    let samples = samples();
    for (filter_json, expected) in table() {
        let filter = Filter::from_value(&filter_json)
            .unwrap_or_else(|e| panic!("{filter_json} is refused: {e}"));
        let taken: Vec<&str> = samples
            .iter()
            .filter(|s| {
                let id = format!("evt_{}", s.name);
                filter.matches(&Event {
                    id: &id,
                    event_type: s.event_type,
                    api_version: "2026-01-01",
                    created_at: "2026-12-05T10:11:12.345Z",
                    data: &s.data,
                    tags: &s.tags,
                })
            })
            .map(|s| s.name)
            .collect();
        assert_eq!(taken, expected, "{filter_json}");
    }
}

#[test]
fn faults_name_their_place_and_kind() {
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!([]), "", "not_an_object"),
        (json!({"amount": 5}), "/amount", "unknown_field"),
        (json!({"type.name": "x"}), "/type.name", "nothing_under"),
        (json!({"data..amount": 5}), "/data..amount", "bad_path"),
        (json!({"data.amount.": 5}), "/data.amount.", "bad_path"),
        (json!({"data.$x": 5}), "/data.$x", "bad_path"),
        (json!({"": 5}), "/", "bad_path"),
        (json!({"$gt": 5}), "/$gt", "misplaced_operator"),
        (
            json!({"data.x": {"$and": []}}),
            "/data.x/$and",
            "misplaced_operator",
        ),
        (json!({"$where": "1"}), "/$where", "unknown_operator"),
        (
            json!({"data.x": {"$regex": "a"}}),
            "/data.x/$regex",
            "unknown_operator",
        ),
        (json!({"data.x": {}}), "/data.x", "no_operator"),
        (json!({"data.x": {"y": 1}}), "/data.x/y", "unknown_operator"),
        (json!({"data.x": [1, 2]}), "/data.x", "bad_operand"),
        (
            json!({"data.x": {"$gt": true}}),
            "/data.x/$gt",
            "bad_operand",
        ),
        (
            json!({"data.x": {"$gt": null}}),
            "/data.x/$gt",
            "bad_operand",
        ),
        (
            json!({"data.x": {"$in": "a"}}),
            "/data.x/$in",
            "bad_operand",
        ),
        (
            json!({"data.x": {"$in": ["a", {"b": 1}]}}),
            "/data.x/$in/1",
            "bad_operand",
        ),
        (
            json!({"data.x": {"$exists": 1}}),
            "/data.x/$exists",
            "bad_operand",
        ),
        (
            json!({"data.x": {"$prefix": 1}}),
            "/data.x/$prefix",
            "bad_operand",
        ),
        (json!({"$and": []}), "/$and", "empty_group"),
        (json!({"$or": {"type": "a"}}), "/$or", "empty_group"),
        (
            json!({"$or": [{"type": "a"}, "b"]}),
            "/$or/1",
            "not_an_object",
        ),
        (json!({"$not": [{"type": "a"}]}), "/$not", "not_an_object"),
        (
            json!({"$and": [{"$or": [{"data.a/b~c": {"$gt": []}}]}]}),
            "/$and/0/$or/0/data.a~1b~0c/$gt",
            "bad_operand",
        ),
        (
            json!({"$and": [{"$and": [{"$and": [{"$not": {"data.x": {"$in": [1]}}}]}]}]}),
            "/$and/0/$and/0/$and/0/$not/data.x",
            "too_deep",
        ),
    ];
    for (filter, pointer, code) in cases {
        let error = Filter::from_value(&filter).expect_err(&filter.to_string());
        assert_eq!(
            (error.pointer(), error.kind().code()),
            (pointer, code),
            "{filter}: {error}"
        );
        assert!(error.to_string().contains(pointer), "{error}");
    }
}

#[test]
fn size_and_depth_limits_are_the_documented_ones() {
    // Eight levels pass; the ninth is refused.
    let eight = json!({"$and": [{"$and": [{"$and": [{"data.x": {"$gt": 1}}]}]}]});
    assert!(Filter::from_value(&eight).is_ok());
    let nine = json!({"$and": [{"$and": [{"$and": [{"data.x": {"$in": [1]}}]}]}]});
    let error = Filter::from_value(&nine).expect_err("nine levels");
    assert_eq!(
        (error.pointer(), error.kind().code()),
        ("/$and/0/$and/0/$and/0/data.x/$in", "too_deep")
    );
    let big = json!({"data.x": {"$in": vec!["abcdefghij"; 400]}});
    let error = Filter::from_value(&big).expect_err("over 4 KiB");
    assert!(matches!(error.kind(), FilterErrorKind::TooLarge { bytes } if *bytes > 4096));
    let fits = json!({"data.x": {"$in": vec!["abcdefghij"; 300]}});
    assert!(Filter::from_value(&fits).is_ok());
    // Exactly at the limit, and one byte past it.
    let sized = |bytes: usize| {
        let frame = json!({"data.x": ""}).to_string().len();
        json!({"data.x": "a".repeat(bytes - frame)})
    };
    assert_eq!(sized(4096).to_string().len(), 4096);
    assert!(Filter::from_value(&sized(4096)).is_ok());
    let error = Filter::from_value(&sized(4097)).expect_err("4097 bytes");
    assert!(matches!(
        error.kind(),
        FilterErrorKind::TooLarge { bytes: 4097 }
    ));
    // Depth is found before size: a value built in code, far too deep and too large, is
    // refused for its depth at its ninth level.
    let mut deep = json!("a".repeat(5000));
    for _ in 0..1000 {
        deep = json!([deep]);
    }
    let error = Filter::from_value(&json!({"data.x": {"$in": deep}})).expect_err("deep");
    assert_eq!(
        (error.pointer(), error.kind().code()),
        ("/data.x/$in/0/0/0/0/0/0", "too_deep")
    );
    assert_eq!(
        Filter::from_json("{\"type\":").map_err(|e| e.kind().code()),
        Err("not_json")
    );
}

#[test]
fn a_stored_filter_reads_back_as_the_same_filter() {
    let filter =
        Filter::from_value(&json!({"data.amount": {"$gte": 10}, "tags": "vip"})).expect("valid");
    let again = Filter::from_json(&filter.to_json()).expect("stored form reads back");
    assert_eq!(again, filter);
    assert!(!filter.is_empty());
    // A float whose shortest form serde_json's fast parser reads back one unit off (the fuzz
    // target's find): exact with `float_roundtrip`.
    let text = r#"{"data.amount":{"$gt":9007199204754993.0277440443709551615}}"#;
    let filter = Filter::from_json(text).expect("valid");
    assert_eq!(Filter::from_json(&filter.to_json()).expect("again"), filter);
    assert!(Filter::from_json("{}").expect("empty").is_empty());
}

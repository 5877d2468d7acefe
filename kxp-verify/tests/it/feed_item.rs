//! The feed item MAC's test vector in docs/signature-format.md, three ways: what kxp-verify
//! computes, the values the doc states, and what the doc's Python block (read from the doc
//! itself, and run) prints. Python is required: a missing interpreter fails the test unless
//! `KXP_SKIP_OTHER_LANGUAGES=1` is set, as for the other languages' snippets.

use std::path::Path;
use std::process::Command;

use kxp_verify::{FeedItemFields, FeedPageFields, Secret};

const DOC: &str = "docs/signature-format.md";

/// The doc's vector, as kxp-verify computes it: read with the secret `whsec_test`, then with
/// the feed token `kxpft_test`.
fn computed() -> [String; 2] {
    let item = FeedItemFields {
        endpoint_id: "ep_1",
        sequence: 8,
        event_id: "6f1c2b0e-9d3a-4e57-8b21-0c4d5e6f7a81",
        ordering_key: Some("pay_123"),
        body: br#"{"id":"6f1c2b0e-9d3a-4e57-8b21-0c4d5e6f7a81","type":"payment.succeeded"}"#,
    };
    [
        item.mac_hex(&Secret::new("whsec_test").unwrap().feed_key()),
        item.mac_hex(&Secret::from_feed_token("kxpft_test").feed_key()),
    ]
}

/// The doc's frame vector: a page with `latest` 12 and a 410 with `earliest` 12, both for
/// `after` 7 of `ep_1`, read with the secret `whsec_test`.
fn computed_frames() -> [String; 2] {
    let key = Secret::new("whsec_test").unwrap().feed_key();
    [
        FeedPageFields::page("ep_1", 7, 12).mac_hex(&key),
        FeedPageFields::purged("ep_1", 7, 12).mac_hex(&key),
    ]
}

fn doc() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(DOC);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The one fenced block whose info string is `python <tag>`.
fn python_block(doc: &str, tag: &str) -> String {
    let fence = format!("```python {tag}\n");
    let mut blocks = doc.split(fence.as_str()).skip(1);
    let block = blocks
        .next()
        .unwrap_or_else(|| panic!("the doc has no Python block {tag}"));
    assert!(blocks.next().is_none(), "{DOC} has two {tag} blocks");
    block.split("\n```").next().unwrap().to_owned()
}

#[test]
fn the_doc_states_the_vector_kxp_verify_computes() {
    let doc = doc();
    for mac in computed().into_iter().chain(computed_frames()) {
        assert!(
            doc.contains(&format!("`mac` = `{mac}`")),
            "{DOC} does not state {mac}"
        );
    }
}

#[test]
fn the_docs_python_computes_the_same_vector() {
    let doc = doc();
    let code = format!(
        "{}\n{}",
        python_block(&doc, "kxp-feed-item-mac"),
        python_block(&doc, "kxp-feed-frame-mac")
    );
    let output = match Command::new("python3").arg("-c").arg(&code).output() {
        Ok(output) => output,
        Err(e) if std::env::var_os("KXP_SKIP_OTHER_LANGUAGES").is_some_and(|v| v == "1") => {
            eprintln!("SKIPPED: python3 did not run ({e}), and KXP_SKIP_OTHER_LANGUAGES=1");
            return;
        }
        Err(e) => panic!("python3 is required (or set KXP_SKIP_OTHER_LANGUAGES=1): {e}"),
    };
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed: Vec<String> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let expected: Vec<String> = computed().into_iter().chain(computed_frames()).collect();
    assert_eq!(printed, expected);
}

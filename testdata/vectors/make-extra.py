#!/usr/bin/env python3
"""Builds extra.json: vectors for grammar rules the shared set leaves unpinned.

The shared 49 vectors (signatures.json, a copy of the project's shared set) can all be passed by
a parser that skips some rules of docs/signature-format.md. These pin each such rule, in the same
format, so every implementation in this repository (Rust, CLI, adapters, the Node/Python/Go doc
snippets) is held to the whole grammar. Deterministic: run it again and the file is identical.
"""
import base64
import hashlib
import hmac
import json
import os

SECRET = "41ab92590637ac82026ca65266b2898428ea491b1e6d543d7202cf486ea62965"
NOW = 1764464523
BODY = (b'{"id":"5f0c6a52-3d2e-4c1f-9a51-8e2b7f1d9c01","type":"payment.succeeded",'
        b'"api_version":"2026-11-01","created_at":"2026-11-30T01:02:03Z","data":{"amount":1999}}')


def sig(t, body=BODY, secret=SECRET):
    return hmac.new(secret.encode(), t.encode() + b"." + body, hashlib.sha256).hexdigest()


def vector(name, header, expect, now=NOW, tolerance=300, body=BODY, secrets=(SECRET,)):
    return {
        "name": name,
        "secrets": list(secrets),
        "header": header,
        "body_b64": base64.b64encode(body).decode(),
        "now": now,
        "tolerance_s": tolerance,
        "expect": expect,
    }


T = str(NOW)
S = sig(T)
padded = f"t={T},v1={S}"
pad_item = ",x=" + "p" * (4096 - len(padded) - 3)
big_t = "9999999999999999999"

vectors = [
    vector("extra_empty_key", f"t={T},=x,v1={S}", "malformed_header"),
    vector("extra_value_containing_equals", f"t={T},v0=a=b,v1={S}", "ok"),
    vector("extra_tabs_around_items", f"t={T}\t,\tv1={S}", "ok"),
    vector("extra_leading_zeros_signed_as_sent", f"t=000{T},v1={sig('000' + T)}", "ok"),
    vector("extra_leading_zeros_not_reformatted", f"t=000{T},v1={S}", "signature_mismatch"),
    vector("extra_header_exactly_4096_bytes", padded + pad_item, "ok"),
    vector("extra_header_4097_bytes", padded + pad_item + "p", "malformed_header"),
    vector("extra_nineteen_digit_timestamp", f"t={big_t},v1={sig(big_t)}", "timestamp_in_future"),
    vector("extra_twenty_digit_timestamp", f"t={big_t}9,v1={sig(big_t + '9')}", "malformed_header"),
    vector("extra_timestamp_zero_in_window", f"t=0,v1={sig('0')}", "ok", now=300),
    vector("extra_timestamp_zero_out_of_window", f"t=0,v1={sig('0')}", "timestamp_too_old", now=301),
    vector("extra_zero_tolerance_exact", f"t={T},v1={S}", "ok", tolerance=0),
    vector("extra_zero_tolerance_one_second_off", f"t={T},v1={S}", "timestamp_too_old", now=NOW + 1, tolerance=0),
    vector("extra_delete_character", f"t={T},v0=\x7f,v1={S}", "malformed_header"),
    vector("extra_non_ascii_in_unknown_item", f"t={T},v0=\u00e9,v1={S}", "malformed_header"),
    vector("extra_newline", f"t={T}\n,v1={S}", "malformed_header"),
    vector("extra_whitespace_only", "  ", "malformed_header"),
    vector("extra_invalid_v1_after_valid_one", f"t={T},v1={S},v1=", "malformed_header"),
    vector("extra_only_unknown_schemes", f"t={T},v2={S}", "malformed_header"),
    vector("extra_same_v1_twice", f"t={T},v1={S},v1={S}", "ok"),
    vector("extra_third_of_three_secrets", f"t={T},v1={sig(T, secret='third')}", "ok",
           secrets=("first", "second", "third")),
    vector("extra_empty_body", f"t={T},v1={sig(T, body=b'')}", "ok", body=b""),
]

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "extra.json")
with open(out, "w", encoding="utf-8") as f:
    json.dump({
        "scheme": "same as signatures.json",
        "about": "rules of docs/signature-format.md that the shared vectors do not pin; made by make-extra.py",
        "vectors": vectors,
    }, f, indent=1, ensure_ascii=False)
    f.write("\n")
print(f"wrote {len(vectors)} vectors to {out}")

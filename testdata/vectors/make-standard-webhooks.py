#!/usr/bin/env python3
"""Builds standard-webhooks.json: vectors for Standard Webhooks 1.0 (`webhook-id`,
`webhook-timestamp`, `webhook-signature`), as kxp-verify's `Verifier::verify_standard` reads them.

The `v1` (HMAC-SHA256) signatures are made by the official `standardwebhooks` package, pinned
below, so the vectors say what the reference implementation signs; each HMAC vector also records
that package's own verdict on it (`library_verdict`, with its clock frozen at the vector's `now`)
so the places where kxp-verify is stricter are written down, not hidden. The `v1a` (Ed25519)
signatures come from the `cryptography` package (OpenSSL), which the Python library does not
cover (any version: Ed25519 is deterministic). Deterministic: the keys are derived from fixed
strings and both signatures are deterministic, so running it again gives the same file.

    python3 -m venv /tmp/sw-venv
    /tmp/sw-venv/bin/pip install standardwebhooks==1.1.0 cryptography
    /tmp/sw-venv/bin/python testdata/vectors/make-standard-webhooks.py
"""
import base64
import datetime as _dt
import hashlib
import json
from importlib.metadata import version
from pathlib import Path

import standardwebhooks.webhooks as sw
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

STANDARDWEBHOOKS_VERSION = "1.1.0"
if version("standardwebhooks") != STANDARDWEBHOOKS_VERSION:
    raise SystemExit(f"needs standardwebhooks=={STANDARDWEBHOOKS_VERSION}, "
                     f"found {version('standardwebhooks')}")

OUT = Path(__file__).resolve().parent / "standard-webhooks.json"
NOW = 1764464523
T = str(NOW)
ID = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
BODY = (b'{"type":"payment.succeeded","timestamp":"2026-11-30T01:02:03Z",'
        b'"data":{"id":"5f0c6a52-3d2e-4c1f-9a51-8e2b7f1d9c01","amount":1999}}')


def key_bytes(i, n):
    return hashlib.sha256(b"kxp standard webhooks secret %d" % i).digest()[:n]


# Three secrets: 24 bytes (what Svix generates: 32 base64 digits, no padding needed), 32 bytes
# (44 digits, one `=`), and 64 bytes (the specification's maximum).
KEYS = [key_bytes(0, 24), key_bytes(1, 32), key_bytes(2, 32)]
LONGEST = hashlib.sha512(b"kxp standard webhooks secret 3").digest()


def whsec(key):
    return "whsec_" + base64.b64encode(key).decode()


SEEDS = [hashlib.sha256(b"kxp standard webhooks key %d" % i).digest() for i in range(4)]
ED_KEYS = [Ed25519PrivateKey.from_private_bytes(s) for s in SEEDS]


def whpk(i):
    return "whpk_" + base64.b64encode(ED_KEYS[i].public_key().public_bytes_raw()).decode()


def at(t):
    return _dt.datetime.fromtimestamp(int(t), tz=_dt.timezone.utc)


def v1(key, msg_id=ID, t=T, body=BODY):
    """The library's own signature: `v1,<base64>`."""
    return sw.Webhook(whsec(key)).sign(msg_id, at(t), body.decode())


def v1a(i, msg_id=ID, t=T, body=BODY):
    message = msg_id.encode() + b"." + t.encode() + b"." + body
    return "v1a," + base64.b64encode(ED_KEYS[i].sign(message)).decode()


class FrozenClock(_dt.datetime):
    """The library reads `datetime.now`; this makes it read the vector's `now`."""
    frozen = NOW

    @classmethod
    def now(cls, tz=None):
        return _dt.datetime.fromtimestamp(cls.frozen, tz=tz)


sw.datetime = FrozenClock


def library_verdict(vector):
    """What standardwebhooks says: "ok" if any configured secret verifies, "error" if it raises
    its WebhookVerificationError, "crash" if it raises anything else (a bug in it, a 500 in a
    receiver), "refused_secret" if it cannot be built from a secret. None without secrets."""
    if not vector["secrets"] or vector["public_keys"]:
        return None
    FrozenClock.frozen = vector["now"]
    headers = {"webhook-id": vector["id"], "webhook-timestamp": vector["timestamp"],
               "webhook-signature": vector["signature"]}
    body = base64.b64decode(vector["body_b64"])
    verdicts = []
    for secret in vector["secrets"]:
        try:
            hook = sw.Webhook(secret)
        except Exception:
            return "refused_secret"
        try:
            hook.verify(body, headers, json_parse=False)
            verdicts.append("ok")
        except sw.WebhookVerificationError:
            verdicts.append("error")
        except Exception:
            verdicts.append("crash")
    for verdict in ("ok", "crash", "error"):
        if verdict in verdicts:
            return verdict
    return "error"


VECTORS = []


def vector(name, expect, about, signature, secrets=None, public_keys=(), msg_id=ID, t=T,
           body=BODY, now=NOW, key_index=None):
    if secrets is None:
        secrets = [] if public_keys else [whsec(KEYS[0])]
    if expect == "ok" and key_index is None:
        key_index = 0
    v = {
        "name": name,
        "about": about,
        "secrets": list(secrets),
        "public_keys": list(public_keys),
        "id": msg_id,
        "timestamp": t,
        "signature": signature,
        "body_b64": base64.b64encode(body).decode(),
        "now": now,
        "tolerance_s": 300,
        "expect": expect,
        "key_index": key_index,
    }
    v["library_verdict"] = library_verdict(v)
    # The reference library must agree wherever kxp-verify's verdict is about the signature or
    # the clock; where kxp-verify calls a header malformed the library may be laxer (recorded).
    if v["library_verdict"] is not None:
        if expect == "ok":
            assert v["library_verdict"] == "ok", v
        elif expect in ("signature_mismatch", "timestamp_too_old", "timestamp_in_future"):
            assert v["library_verdict"] == "error", v
    assert name not in [w["name"] for w in VECTORS], name
    VECTORS.append(v)


A, B, C = KEYS
sig_a = v1(A)

# --- v1 (HMAC-SHA256) ---
vector("valid_single", "ok", "one v1 by the one configured secret", sig_a)
vector("valid_rotation_two_v1_receiver_on_new", "ok",
       "a rotating sender signs with the new and the old secret, newest first; the receiver "
       "holds the new one (the first item matches)",
       f"{v1(B)} {v1(A)}", secrets=[whsec(B)])
vector("valid_rotation_two_v1_receiver_on_old", "ok",
       "the same header; the receiver still holds the old secret (the second item matches)",
       f"{v1(B)} {v1(A)}", secrets=[whsec(A)])
vector("valid_receiver_has_two_secrets", "ok",
       "the receiver holds new and old; the sender still signs with the old one only: the "
       "second configured secret matches",
       sig_a, secrets=[whsec(B), whsec(A)], key_index=1)
vector("valid_rotation_both_sides", "ok",
       "both sides hold both secrets: the first item in header order that any secret matches, "
       "by the first secret that matches it",
       f"{v1(B)} {v1(A)}", secrets=[whsec(A), whsec(B)], key_index=1)
vector("valid_v1_beside_v1a", "ok",
       "a sender signing both ways; a verifier with secrets checks the v1 item only",
       f"{v1a(0)} {sig_a}")
vector("valid_unknown_version_ignored", "ok",
       "items of other versions (v2, v1b, V1) are ignored, whatever their value",
       f"v2,bm90IGEgc2lnbmF0dXJl v1b,x V1,{sig_a[3:]} {sig_a}")
vector("valid_whsec_without_prefix", "ok",
       "the official libraries base64-decode a secret without its whsec_ prefix too",
       sig_a, secrets=[whsec(A)[len("whsec_"):]])
vector("valid_whsec_unpadded", "ok",
       "a 32-byte key's base64 without its `=`: the Python library adds the padding back",
       v1(B), secrets=[whsec(B).rstrip("=")])
vector("valid_whsec_longest_key", "ok", "a 64-byte key, the specification's maximum",
       v1(LONGEST), secrets=[whsec(LONGEST)])
vector("valid_oldest_in_tolerance", "ok", "signed exactly 300 s before now",
       v1(A, t=str(NOW - 300)), t=str(NOW - 300))
vector("valid_newest_in_tolerance", "ok", "signed exactly 300 s after now",
       v1(A, t=str(NOW + 300)), t=str(NOW + 300))
vector("valid_sixteen_items", "ok", "16 items, the bound, the last one the real v1",
       " ".join(["v2,x"] * 15 + [sig_a]))
vector("valid_empty_body", "ok", "an empty body is signed as `<id>.<t>.`",
       v1(A, body=b""), body=b"")
vector("wrong_secret", "signature_mismatch", "signed with another secret", v1(C))
vector("tampered_body", "signature_mismatch", "one byte of the body changed after signing",
       sig_a, body=BODY.replace(b"1999", b"1998"))
vector("tampered_id", "signature_mismatch", "the webhook-id changed after signing",
       sig_a, msg_id=ID[:-1] + "X")
vector("tampered_timestamp", "signature_mismatch",
       "the webhook-timestamp changed after signing (still within the tolerance)",
       sig_a, t=str(NOW + 1))
vector("forged_mac", "signature_mismatch", "a well-formed v1 that is no MAC of these bytes",
       "v1," + base64.b64encode(bytes(32)).decode())
vector("timestamp_too_old", "timestamp_too_old", "authentic, signed 301 s before now",
       v1(A, t=str(NOW - 301)), t=str(NOW - 301))
vector("timestamp_in_future", "timestamp_in_future", "authentic, signed 301 s after now",
       v1(A, t=str(NOW + 301)), t=str(NOW + 301))
vector("forged_and_too_old", "signature_mismatch",
       "a forgery is a mismatch whatever its timestamp: the signature is checked first",
       sig_a, t=str(NOW - 3600))
for name, t, about in [
    ("malformed_timestamp_letters", "abc", "not digits"),
    ("malformed_timestamp_fraction", T + ".5", "a decimal point (the Python library floors it)"),
    ("malformed_timestamp_negative", "-" + T, "a sign"),
    ("malformed_timestamp_plus", "+" + T, "a sign"),
    ("malformed_timestamp_leading_zero", "0" + T,
     "a leading zero: the libraries sign the number re-written without it, so the header "
     "would not show the signed bytes"),
    ("malformed_timestamp_space", " " + T, "a space (Python's float() strips it)"),
    ("malformed_timestamp_twenty_digits", "1" * 20, "past 19 digits"),
]:
    # Signed by the library as it reads the value, where it can: so only the grammar refuses.
    try:
        signature = v1(A, t=str(int(float(t))))
    except (ValueError, OverflowError, OSError):
        signature = sig_a
    vector(name, "malformed_header", f"webhook-timestamp: {about}", signature, t=t)
vector("missing_signature_header", "missing_header", "an empty (or absent) webhook-signature", "")
vector("missing_id_header", "missing_header", "an empty (or absent) webhook-id", sig_a, msg_id="")
vector("missing_timestamp_header", "missing_header", "an empty (or absent) webhook-timestamp",
       sig_a, t="")
vector("malformed_missing_comma", "malformed_header", "an item without `,`",
       sig_a.replace(",", "", 1))
vector("malformed_empty_version", "malformed_header", "an item with nothing before its `,`",
       sig_a[2:])
vector("malformed_bad_base64", "malformed_header", "a v1 value that is not base64",
       "v1,not*base64*at*all*not*base64*at*all*not=")
vector("malformed_v1_unpadded", "malformed_header",
       "a v1 value without its `=`: values must be the canonical padded base64",
       sig_a.rstrip("="))
vector("malformed_v1_url_safe", "malformed_header", "a v1 value in the URL-safe alphabet",
       "v1," + base64.urlsafe_b64encode(b"\xfb" * 32).decode())
vector("malformed_v1_wrong_length", "malformed_header", "the base64 of 31 bytes",
       "v1," + base64.b64encode(bytes(31)).decode())
vector("malformed_double_space", "malformed_header",
       "two spaces between items (an empty item; the Python library crashes on it)",
       f"{v1(B)}  {sig_a}")
vector("malformed_trailing_space", "malformed_header", "a trailing space", sig_a + " ")
vector("malformed_tab_separator", "malformed_header", "items separated by a tab",
       f"{v1(B)}\t{sig_a}")
vector("malformed_only_unknown_versions", "malformed_header", "no v1 item at all",
       "v2,x v1a," + base64.b64encode(bytes(64)).decode())
vector("malformed_seventeen_items", "malformed_header",
       "more than 16 items, even when one of them matches",
       " ".join(["v2,x"] * 16 + [sig_a]))
vector("malformed_signature_too_long", "malformed_header",
       "a webhook-signature over 4096 bytes",
       sig_a + " v2," + "x" * (4096 - len(sig_a) - 3))
vector("malformed_id_with_dot", "malformed_header",
       "a `.` in webhook-id would let the id and the timestamp trade bytes in the signed content",
       v1(A, msg_id="msg.1"), msg_id="msg.1")
vector("malformed_id_with_space", "malformed_header", "webhook-id must be visible ASCII",
       v1(A, msg_id="msg 1"), msg_id="msg 1")
vector("invalid_secret_bad_base64", "invalid_secret", "a whsec_ secret that is not base64",
       sig_a, secrets=["whsec_not*base64"])
vector("invalid_secret_too_long", "invalid_secret", "a key of 65 bytes, past the maximum",
       sig_a, secrets=[whsec(LONGEST + b"x")])
vector("empty_secret", "empty_secret", "a whsec_ prefix and nothing else", sig_a,
       secrets=["whsec_"])

# --- v1a (Ed25519) ---
keys = [whpk(0)]
vector("ed25519_valid_single", "ok", "one v1a by the one configured public key", v1a(0),
       public_keys=keys)
vector("ed25519_valid_beside_v1", "ok",
       "a sender signing both ways; a verifier with public keys checks the v1a item only",
       f"{sig_a} {v1a(0)}", public_keys=keys)
vector("ed25519_valid_rotation", "ok",
       "two keys, newest first; the receiver holds the old one",
       f"{v1a(1)} {v1a(0)}", public_keys=keys)
vector("ed25519_valid_receiver_has_two_keys", "ok", "the second configured key verifies",
       v1a(0), public_keys=[whpk(1), whpk(0)], key_index=1)
vector("ed25519_valid_whpk_without_prefix", "ok", "a public key without its whpk_ prefix",
       v1a(0), public_keys=[whpk(0)[len("whpk_"):]])
vector("ed25519_wrong_key", "signature_mismatch", "signed by another key", v1a(2),
       public_keys=keys)
vector("ed25519_tampered_body", "signature_mismatch", "the body changed after signing", v1a(0),
       public_keys=keys, body=BODY.replace(b"1999", b"1998"))
vector("ed25519_tampered_id", "signature_mismatch", "the id changed after signing", v1a(0),
       public_keys=keys, msg_id=ID[:-1] + "X")
vector("ed25519_timestamp_too_old", "timestamp_too_old", "authentic, signed 301 s before now",
       v1a(0, t=str(NOW - 301)), public_keys=keys, t=str(NOW - 301))
vector("ed25519_only_v1", "malformed_header",
       "a verifier with public keys finds no v1a item: the v1 is an unknown item to it",
       sig_a, public_keys=keys)
vector("ed25519_bad_base64", "malformed_header", "a v1a value that is not base64",
       "v1a,not*base64", public_keys=keys)
vector("ed25519_five_v1a", "malformed_header",
       "more than 4 v1a items, even when one of them verifies",
       " ".join([v1a(1)] * 4 + [v1a(0)]), public_keys=keys)
vector("ed25519_four_v1a", "ok", "4 v1a items, the bound, the last one verifying",
       " ".join([v1a(1)] * 3 + [v1a(0)]), public_keys=keys)

OUT.write_text(json.dumps({
    "scheme": "Standard Webhooks 1.0 (webhook-id, webhook-timestamp, webhook-signature)",
    "about": "Each vector: a verifier configured with `secrets` (whsec_ text; the HMAC key is the "
             "decoded bytes) or `public_keys` (whpk_ text), the three header values (empty = "
             "absent), the raw body (base64), the verifier's clock `now` and tolerance. `expect` "
             "is `ok`, an error kind, or the configuration error that refuses the keys "
             "(`invalid_secret`, `empty_secret`). For `ok`, `key_index` is the configured key "
             "that verified. `library_verdict` is what the official Python library says of the "
             "HMAC vectors (null where it does not apply). Made by make-standard-webhooks.py.",
    "generator": {"standardwebhooks": STANDARDWEBHOOKS_VERSION},
    "vectors": VECTORS,
}, indent=1) + "\n", encoding="utf-8")
print(f"{OUT.name}: {len(VECTORS)} vectors")

#!/usr/bin/env python3
"""Rebuild fuzz/corpus/<target>/ from the shared vectors (testdata/vectors/signatures.json,
ed25519.json for verify_v1a, and standard-webhooks.json for verify_standard).

Each seed is one vector in the input layout of its target, named after the vector, so a seed
that libFuzzer reports or minimizes can be traced back to the rule it exercises:

  header    the header bytes
  verify    now (u64 LE) | header length (u16 LE) | header | body   (see fuzz_targets/verify.rs)
  verify_v1a  the same layout, from ed25519.json
  verify_standard  now (u64 LE) | id, timestamp and signature lengths (u16 LE each) | id |
            timestamp | signature | body   (see fuzz_targets/verify_standard.rs)
  envelope  the body bytes

Deterministic (same vectors, same files) and stdlib only, so it runs anywhere CI has python3.
The seed directories are emptied first: a seed whose vector was renamed or removed must not
linger. Bodies over MAX_BODY are skipped: libFuzzer mutates within its -max_len, which it
derives from the largest seed, and big seeds slow every run without covering anything a small
one does not.

Usage: fuzz/make-seeds.py   (from any directory)
"""

import base64
import json
import struct
import sys
from pathlib import Path

FUZZ_DIR = Path(__file__).resolve().parent
VECTORS = FUZZ_DIR.parent / "testdata" / "vectors" / "signatures.json"
# The Ed25519 vectors seed `verify_v1a` (the verify layout; the target's keys are theirs).
ED25519_VECTORS = FUZZ_DIR.parent / "testdata" / "vectors" / "ed25519.json"
# The Standard Webhooks vectors seed `verify_standard` (the target holds their first keys).
STANDARD_VECTORS = FUZZ_DIR.parent / "testdata" / "vectors" / "standard-webhooks.json"
CORPUS = FUZZ_DIR / "corpus"
MAX_BODY = 4096
# A seed longer than this would not fit the verify layout's u16 header length.
MAX_HEADER = 0xFFFF
ENVELOPE_FORMS = [
    ("thin_notice", b'{"id":"evt_1","type":"payment.succeeded","api_version":"2026-11-01",'
                    b'"created_at":"2026-11-30T01:02:03Z","thin":true}'),
    ("thin_beside_data", b'{"id":"evt_1","type":"payment.succeeded","api_version":"2026-11-01",'
                         b'"created_at":"2026-11-30T01:02:03Z","data":{"amount":1999},"thin":true}'),
]


def seeds(vector):
    """The (target, bytes) seeds of one vector, or none if it is too big to be useful."""
    header = vector["header"].encode("utf-8")
    body = base64.b64decode(vector["body_b64"], validate=True)
    if len(body) > MAX_BODY or len(header) > MAX_HEADER:
        return []
    verify = struct.pack("<QH", vector["now"], len(header)) + header + body
    return [("header", header), ("verify", verify), ("envelope", body)]


def ed25519_seeds(vector):
    """The `verify_v1a` seed of one Ed25519 vector."""
    header = vector["header"].encode("utf-8")
    body = base64.b64decode(vector["body_b64"], validate=True)
    return [("verify_v1a", struct.pack("<QH", vector["now"], len(header)) + header + body)]


def standard_seeds(vector):
    """The `verify_standard` seed of one Standard Webhooks vector."""
    fields = [vector[k].encode("utf-8") for k in ("id", "timestamp", "signature")]
    body = base64.b64decode(vector["body_b64"], validate=True)
    if len(body) > MAX_BODY or any(len(f) > MAX_HEADER for f in fields):
        return []
    head = struct.pack("<QHHH", vector["now"], *(len(f) for f in fields))
    return [("verify_standard", head + b"".join(fields) + body)]


def main():
    vectors = json.loads(VECTORS.read_text(encoding="utf-8"))["vectors"]
    ed25519 = json.loads(ED25519_VECTORS.read_text(encoding="utf-8"))["vectors"]
    standard = json.loads(STANDARD_VECTORS.read_text(encoding="utf-8"))["vectors"]
    names = [v["name"] for v in vectors]
    if len(set(names)) != len(names):
        sys.exit("make-seeds: vector names are not unique, seeds would overwrite each other")

    written = {}
    seen = {}
    for target in ("header", "verify", "verify_v1a", "verify_standard", "envelope"):
        directory = CORPUS / target
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.iterdir():
            old.unlink()
        written[target] = 0
        seen[target] = set()

    skipped = []
    for vector, pairs in ([(v, seeds(v)) for v in vectors]
                          + [(v, ed25519_seeds(v)) for v in ed25519]
                          + [(v, standard_seeds(v)) for v in standard]):
        if not pairs:
            skipped.append(vector["name"])
        for target, data in pairs:
            # Many vectors share a body (or a header): one copy is enough for libFuzzer, which
            # would drop the duplicates anyway. The first vector's name is kept.
            if data in seen[target]:
                continue
            seen[target].add(data)
            (CORPUS / target / vector["name"]).write_bytes(data)
            written[target] += 1

    # Envelope forms no signature vector has, so the fuzzer starts from each reading of
    # `Verified::envelope`: a thin notice (no `data`), and `thin` beside `data` (a full event).
    for name, body in ENVELOPE_FORMS:
        (CORPUS / "envelope" / name).write_bytes(body)
        written["envelope"] += 1

    for target, count in written.items():
        print(f"corpus/{target}: {count} seeds")
    if skipped:
        print(f"skipped (body over {MAX_BODY} bytes): {', '.join(skipped)}")


if __name__ == "__main__":
    main()

"""Standard Webhooks interop, Python side: the official `standardwebhooks` package and Svix's
`svix` SDK, at the versions .ci/interop-install pins. Driven by
kxp-sender/tests/it/standard_webhooks.rs (through kxp_testkit::interop), which writes the cases and reads the answers.

    python standard_webhooks.py verify CASES   # one "name<TAB>library<TAB>ok|error" per case
    python standard_webhooks.py sign CASES     # JSON: {library: {name: webhook-signature}}

A verify case is a delivery as it arrived (id, timestamp, signature, body_b64) and the one
secret to verify it with; a sign case is an id, a timestamp, a body and the secrets to sign
with, newest first: the signatures are joined with spaces, as a sender does in a rotation.
"""

import base64
import json
import sys
from datetime import datetime, timezone

import standardwebhooks.webhooks as standardwebhooks
import svix.webhooks as svix

LIBRARIES = {"standardwebhooks": standardwebhooks.Webhook, "svix": svix.Webhook}


def verify(cases):
    for case in cases:
        body = base64.b64decode(case["body_b64"], validate=True)
        headers = {
            "webhook-id": case["id"],
            "webhook-timestamp": case["timestamp"],
            "webhook-signature": case["signature"],
        }
        for name, webhook in LIBRARIES.items():
            try:
                webhook(case["secret"]).verify(body, headers)
                verdict = "ok"
            except Exception:  # Each library raises its own WebhookVerificationError.
                verdict = "error"
            print(f"{case['name']}\t{name}\t{verdict}")


def sign(cases):
    answers = {}
    for name, webhook in LIBRARIES.items():
        signed = answers.setdefault(name, {})
        for case in cases:
            at = datetime.fromtimestamp(case["timestamp"], tz=timezone.utc)
            body = base64.b64decode(case["body_b64"], validate=True).decode("utf-8")
            signatures = [webhook(s).sign(case["id"], at, body) for s in case["secrets"]]
            signed[case["name"]] = " ".join(signatures)
    print(json.dumps(answers))


if __name__ == "__main__":
    mode, path = sys.argv[1], sys.argv[2]
    with open(path, encoding="utf-8") as f:
        cases = json.load(f)
    {"verify": verify, "sign": sign}[mode](cases)

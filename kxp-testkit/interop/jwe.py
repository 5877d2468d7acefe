"""JWE interop, Python side: jwcrypto, at the version .ci/interop-install pins. Driven by the
payload encryption tests (through kxp_testkit::interop), which write the cases and read the
answers.

    python jwe.py decrypt CASES   # one "name<TAB>jwcrypto<TAB>ok:<base64 plaintext>|error" per case
    python jwe.py encrypt CASES   # JSON: {name: JWE compact}

A decrypt case is a private JWK and a JWE; an encrypt case is a public JWK, a base64
plaintext, and optionally `alg`, `enc` and `zip` for the protected header (default
ECDH-ES+A256KW and A256GCM).
"""

import base64
import json
import sys

from jwcrypto import jwe, jwk


def decrypt(cases):
    for case in cases:
        key = jwk.JWK(**case["jwk"])
        try:
            token = jwe.JWE()
            token.deserialize(case["jwe"], key=key)
            verdict = "ok:" + base64.b64encode(token.payload).decode()
        except Exception:  # jwcrypto raises several kinds; any is a refusal.
            verdict = "error"
        print(f"{case['name']}\tjwcrypto\t{verdict}")


def encrypt(cases):
    answers = {}
    for case in cases:
        header = {"alg": case.get("alg", "ECDH-ES+A256KW"), "enc": case.get("enc", "A256GCM")}
        if "zip" in case:
            header["zip"] = case["zip"]
        plaintext = base64.b64decode(case["plaintext_b64"], validate=True)
        token = jwe.JWE(plaintext, protected=json.dumps(header))
        token.add_recipient(jwk.JWK(**case["jwk"]))
        answers[case["name"]] = token.serialize(compact=True)
    print(json.dumps(answers))


if __name__ == "__main__":
    mode, path = sys.argv[1], sys.argv[2]
    with open(path, encoding="utf-8") as f:
        cases = json.load(f)
    {"decrypt": decrypt, "encrypt": encrypt}[mode](cases)

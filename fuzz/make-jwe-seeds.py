"""Seeds for the `jwe` fuzz target, made by an independent implementation (jwcrypto, as
.ci/interop-install pins it) with the fuzzing keys of fuzz_targets/jwe.rs: a JWE to each key,
an envelope holding one, and the public JWKs. Run from fuzz/ with the interop venv:

    /tmp/kxp-interop/venv/bin/python make-jwe-seeds.py
"""

import json
import pathlib
import re

from jwcrypto import jwe, jwk

source = pathlib.Path("fuzz_targets/jwe.rs").read_text(encoding="utf-8")
keys = [json.loads(k) for k in re.findall(r'r#"(\{.*?\})"#', source)]
out = pathlib.Path("corpus/jwe")
out.mkdir(parents=True, exist_ok=True)
for private in keys:
    key = jwk.JWK(**private)
    token = jwe.JWE(b'{"card":"4242"}', protected=json.dumps({"alg": "ECDH-ES+A256KW", "enc": "A256GCM"}))
    token.add_recipient(key)
    compact = token.serialize(compact=True)
    name = private["crv"].lower()
    (out / f"{name}-jwe").write_text(compact, encoding="utf-8")
    envelope = {"id": "evt_1", "type": "payment.succeeded", "api_version": "2026-11-01",
                "created_at": "2026-12-01T10:00:00Z", "data_jwe": compact}
    (out / f"{name}-envelope").write_text(json.dumps(envelope, separators=(",", ":")), encoding="utf-8")
    public = {k: v for k, v in private.items() if k != "d"}
    (out / f"{name}-jwk").write_text(json.dumps(public), encoding="utf-8")

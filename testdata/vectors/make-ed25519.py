#!/usr/bin/env python3
"""Builds ed25519.json: vectors for `v1a` items (Ed25519 signatures in X-Kxp-Signature).

The valid signatures come from the `cryptography` package (OpenSSL), an implementation other than
the one under test; the edge cases (non-canonical S, R and keys, small-order R and keys) are made
with the RFC 8032 arithmetic below, since no library signs them. Independent libraries disagree on
several of these cases, so the verdicts pin kxp-verify's rules (docs/signature-format.md: strict
verification), not a consensus. Each edge case is built so that some lax verifier accepts it (the
comment says which), so refusing it is a real decision. Deterministic: run it again and the file
is identical.

    python3 testdata/vectors/make-ed25519.py      # needs `cryptography` (pip install cryptography)
"""
import base64
import hashlib
import hmac
import json
import os

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

NOW = 1764464523
T = str(NOW)
BODY = (b'{"id":"5f0c6a52-3d2e-4c1f-9a51-8e2b7f1d9c01","type":"payment.succeeded",'
        b'"api_version":"2026-11-01","created_at":"2026-11-30T01:02:03Z","data":{"amount":1999}}')
SECRET = "41ab92590637ac82026ca65266b2898428ea491b1e6d543d7202cf486ea62965"

# --- RFC 8032 §5.1 arithmetic (affine-free extended coordinates, as in its §6 reference) ---
P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)


def add(p1, p2):
    x1, y1, z1, t1 = p1
    x2, y2, z2, t2 = p2
    a = (y1 - x1) * (y2 - x2) % P
    b = (y1 + x1) * (y2 + x2) % P
    c = 2 * t1 * t2 * D % P
    d = 2 * z1 * z2 % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def mul(s, p):
    q = (0, 1, 1, 0)
    while s > 0:
        if s & 1:
            q = add(q, p)
        p = add(p, p)
        s >>= 1
    return q


def recover_x(y, sign):
    if y >= P:
        return None
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P != 0:
        x = x * SQRT_M1 % P
    if (x * x - x2) % P != 0:
        return None
    if (x & 1) != sign:
        x = P - x
    return x


def point(x, y):
    return (x, y, 1, x * y % P)


def compress(p):
    x, y, z, _ = p
    zi = pow(z, P - 2, P)
    x, y = x * zi % P, y * zi % P
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def encode_y(y, sign):
    """An encoding as written, canonical or not (y may be p or more)."""
    return (y | (sign << 255)).to_bytes(32, "little")


G_Y = 4 * pow(5, P - 2, P) % P
G = point(recover_x(G_Y, 0), G_Y)


def h_int(*parts):
    return int.from_bytes(hashlib.sha512(b"".join(parts)).digest(), "little")


def secret_scalar(seed):
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little")
    a &= (1 << 254) - 8
    a |= 1 << 254
    return a


def public_of(seed):
    return compress(mul(secret_scalar(seed), G))


def message(t=T, body=BODY):
    return t.encode() + b"." + body


def forge(seed, r_bytes, msg):
    """S = k·a for a chosen R: valid by the plain equation [S]B = R + [k]A exactly when R is the
    identity, and by the cofactored one ([8][S]B = [8]R + [8][k]A) whenever R has small order."""
    a = secret_scalar(seed)
    k = h_int(r_bytes, public_of(seed), msg) % L
    return r_bytes + (k * a % L).to_bytes(32, "little")


# --- keys and signatures ---
SEEDS = [hashlib.sha256(b"kxp ed25519 vector key %d" % i).digest() for i in range(4)]
KEYS = [Ed25519PrivateKey.from_private_bytes(s) for s in SEEDS]


def pub(i):
    raw = KEYS[i].public_key().public_bytes_raw()
    assert raw == public_of(SEEDS[i])
    return b64(raw)


def b64(data):
    return base64.b64encode(data).decode()


def sign(i, t=T, body=BODY):
    return KEYS[i].sign(message(t, body))


def v1(t=T, body=BODY):
    return hmac.new(SECRET.encode(), t.encode() + b"." + body, hashlib.sha256).hexdigest()


def vector(name, header, expect, keys=(0,), public_keys=None, secrets=(), now=NOW,
           tolerance=300, body=BODY, about=None):
    if public_keys is None:
        public_keys = [pub(i) for i in keys]
    v = {
        "name": name,
        "public_keys": list(public_keys),
        "secrets": list(secrets),
        "header": header,
        "body_b64": b64(body),
        "now": now,
        "tolerance_s": tolerance,
        "expect": expect,
    }
    if about:
        v["about"] = about
    return v


S0 = b64(sign(0))
S1 = b64(sign(1))
S2 = b64(sign(2))

# A signature whose S has room for S + L below 2^253 (what legacy verifiers check), and one whose
# base64 has a `+` or `/` (to show the URL-safe alphabet is refused).
raw0 = sign(0)
s_value = int.from_bytes(raw0[32:], "little")
assert s_value + L < 2**253
non_canonical_s = raw0[:32] + (s_value + L).to_bytes(32, "little")
assert "+" in S0 or "/" in S0
urlsafe = S0.replace("+", "-").replace("/", "_")

IDENTITY = encode_y(1, 0)
# A point of order 8 (the torsion point used by "Taming the many EdDSAs", Chalkias et al. 2020).
ORDER_8 = bytes.fromhex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a")
o8 = ORDER_8
y8 = int.from_bytes(o8, "little") & ((1 << 255) - 1)
p8 = point(recover_x(y8, o8[31] >> 7), y8)
assert compress(mul(8, p8)) == IDENTITY and compress(mul(4, p8)) != IDENTITY

# The non-canonical spellings of the identity: y = p + 1, and x = 0 with the sign bit set.
IDENTITY_Y_PLUS_P = encode_y(1 + P, 0)
IDENTITY_SIGN_BIT = encode_y(1, 1)
# A point of large order with y < 19, so that y + p still fits: its non-canonical key spelling.
for y in range(2, 19):
    x = recover_x(y, 0)
    if x is not None and compress(mul(8, point(x, y))) != IDENTITY:
        LOW_Y = y
        break
NON_CANONICAL_KEY = encode_y(LOW_Y + P, 0)
# Not a point at all: the smallest y with no x.
OFF_CURVE = encode_y(next(y for y in range(2, 100) if recover_x(y, 0) is None), 0)

msg = message()
r_identity = forge(SEEDS[0], IDENTITY, msg)
r_order_8 = forge(SEEDS[0], o8, msg)
r_y_plus_p = forge(SEEDS[0], IDENTITY_Y_PLUS_P, msg)
r_sign_bit = forge(SEEDS[0], IDENTITY_SIGN_BIT, msg)
# A small-order key with S = 0 and R the identity: [0]B = R + [k]A holds when 8 divides k
# (A has order 8), so search a timestamp for which it does; cofactored verifiers accept any k.
for dt in range(1000):
    t_weak = str(NOW - dt)
    if h_int(IDENTITY, o8, message(t_weak)) % L % 8 == 0:
        break
weak_signature = IDENTITY + bytes(32)
weak = Ed25519PublicKey.from_public_bytes(o8)  # OpenSSL takes it: the check is ours.
del weak

H = f"t={T},v1a="
random_sig = b64(hashlib.sha512(b"not a signature").digest())

vectors = [
    vector("valid_single_key", H + S0, "ok"),
    vector("valid_second_of_two_keys", H + S1, "ok", keys=(0, 1)),
    vector("valid_second_v1a_item", f"{H}{S2},v1a={S0}", "ok", keys=(0, 1),
           about="the first item is by a key the receiver does not have"),
    vector("valid_two_items_two_keys", f"{H}{S1},v1a={S0}", "ok", keys=(0, 1)),
    vector("valid_fourth_of_four_items", f"{H}{random_sig},v1a={S2},v1a={S2},v1a={S0}", "ok"),
    vector("valid_spaced_and_reordered", f" v0=x, v1a={S0} ,\tt={T}", "ok"),
    vector("valid_v1_and_v1a_public_key_verifier", f"t={T},v1={v1()},v1a={S0}", "ok"),
    vector("valid_v1_and_v1a_secret_verifier", f"t={T},v1={v1()},v1a={S0}", "ok",
           public_keys=[], secrets=[SECRET]),
    vector("public_key_verifier_ignores_a_malformed_v1", f"t={T},v1=zz,v1a={S0}", "ok",
           about="to a verifier with public keys, v1 is an unknown item"),
    vector("secret_verifier_ignores_a_malformed_v1a", f"t={T},v1={v1()},v1a=!!", "ok",
           public_keys=[], secrets=[SECRET],
           about="to a verifier with secrets, v1a is an unknown item"),
    vector("secret_verifier_needs_a_v1", H + S0, "malformed_header", public_keys=[],
           secrets=[SECRET]),
    vector("public_key_verifier_needs_a_v1a", f"t={T},v1={v1()}", "malformed_header"),
    vector("wrong_key", H + S1, "signature_mismatch"),
    vector("tampered_body", H + S0, "signature_mismatch", body=BODY.replace(b"1999", b"9999")),
    vector("tampered_t", f"t={NOW + 1},v1a={S0}", "signature_mismatch"),
    vector("stale", H + S0, "timestamp_too_old", now=NOW + 301),
    vector("in_future", H + S0, "timestamp_in_future", now=NOW - 301),
    vector("forged_and_stale_reads_mismatch", H + S1, "signature_mismatch", now=NOW + 3600),
    vector("bad_base64_character", H + "*" + S0[1:], "malformed_header"),
    vector("url_safe_alphabet", H + urlsafe, "malformed_header"),
    vector("padding_missing", H + S0.rstrip("="), "malformed_header"),
    vector("padding_doubled", H + S0 + "=", "malformed_header"),
    vector("wrong_length_63_bytes", H + b64(raw0[:63]), "malformed_header"),
    vector("wrong_length_65_bytes", H + b64(raw0 + b"\0"), "malformed_header"),
    vector("hex_instead_of_base64", H + raw0.hex(), "malformed_header"),
    vector("empty_value", f"t={T},v1a=,v1a={S0}", "malformed_header"),
    vector("trailing_bits_set", H + S0[:85] + chr(ord(S0[85]) + 1) + "==", "malformed_header",
           about="the 4 unused bits of the last digit must be zero: one signature, one spelling"),
    vector("five_v1a_items", f"{H}{S0},v1a={S0},v1a={S0},v1a={S0},v1a={S0}", "malformed_header",
           about="at most 4 v1a items, even when the first verifies"),
    vector("five_v1a_items_secret_verifier", f"t={T},v1={v1()}" + f",v1a={S0}" * 5, "ok",
           public_keys=[], secrets=[SECRET]),
    vector("non_canonical_s", H + b64(non_canonical_s), "signature_mismatch",
           about="S + L: accepted by verifiers that only check the top 3 bits of S"),
    vector("r_is_the_identity", H + b64(r_identity), "signature_mismatch",
           about="S = k·a with R the identity: accepted by plain (non-strict) verification"),
    vector("r_of_order_8", H + b64(r_order_8), "signature_mismatch",
           about="S = k·a with R of small order: accepted by cofactored verification"),
    vector("r_non_canonical_y", H + b64(r_y_plus_p), "signature_mismatch",
           about="R the identity spelt with y = p + 1, k hashed over that spelling"),
    vector("r_non_canonical_sign_bit", H + b64(r_sign_bit), "signature_mismatch",
           about="R the identity spelt with the sign bit set on x = 0"),
    vector("small_order_public_key", f"t={t_weak},v1a={b64(weak_signature)}", "weak_public_key",
           public_keys=[b64(o8)], now=int(t_weak),
           about="R the identity, S = 0, A of order 8 and 8 | k: accepted by plain verification"),
    vector("identity_public_key", H + S0, "weak_public_key", public_keys=[pub(0), b64(IDENTITY)]),
    vector("non_canonical_public_key", H + S0, "invalid_public_key",
           public_keys=[b64(NON_CANONICAL_KEY)],
           about="a point of large order with y < 19, spelt y + p"),
    vector("non_canonical_public_key_sign_bit", H + S0, "invalid_public_key",
           public_keys=[b64(IDENTITY_SIGN_BIT)]),
    vector("public_key_off_the_curve", H + S0, "invalid_public_key", public_keys=[b64(OFF_CURVE)]),
    vector("public_key_wrong_length", H + S0, "invalid_public_key", public_keys=[b64(bytes(31))]),
]

names = [v["name"] for v in vectors]
assert len(names) == len(set(names))

doc = {
    "scheme": "v1a: Ed25519 over <t>.<raw body>, padded standard base64, in X-Kxp-Signature",
    "about": ("Each vector is a verifier (public_keys, standard base64 of 32 bytes; or secrets, "
              "for an HMAC verifier: exactly one of the two is non-empty), a request and the "
              "verdict: ok, an error kind, or invalid_public_key / weak_public_key when the "
              "verifier cannot be built. Made by make-ed25519.py; the edge cases pin "
              "kxp-verify's strict rules, not a consensus of libraries."),
    "vectors": vectors,
}
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ed25519.json")
with open(path, "w") as f:
    json.dump(doc, f, indent=2, ensure_ascii=False)
    f.write("\n")
print(f"wrote {len(vectors)} vectors to {path}")

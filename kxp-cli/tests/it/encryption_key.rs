//! `kxp encryption-key generate` and `public`, run as real processes: the generated key reads
//! as a private JWK of the chosen curve, `public` prints its public half (which the sender
//! accepts as an `encryption_jwk`, and which decrypts nothing), and a public JWK given to
//! `public` is refused by name.

use std::io::Write;
use std::process::{Command, Stdio};

use kxp_jwe::{Curve, DecryptionKey, EncryptionKey};

/// Runs `kxp encryption-key <args>` with `stdin`: (exit code, stdout, stderr).
fn kxp(args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kxp"))
        .arg("encryption-key")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn a_generated_key_and_its_public_half() {
    for (flag, curve) in [("x25519", Curve::X25519), ("p-256", Curve::P256)] {
        let (code, private, err) = kxp(&["generate", "--curve", flag, "--kid", "2026-12"], "");
        assert_eq!(code, 0, "{err}");
        let key = DecryptionKey::from_jwk(private.trim()).unwrap();
        assert_eq!(key.curve(), curve);
        let (code, public, err) = kxp(&["public"], &private);
        assert_eq!(code, 0, "{err}");
        let public = EncryptionKey::from_jwk(public.trim()).unwrap();
        assert_eq!(public, key.public());
        assert_eq!(public.kid(), Some("2026-12"));
        let sealed = public.encrypt(b"{}").unwrap();
        assert_eq!(&key.decrypt(&sealed).unwrap()[..], b"{}");
        let (_, again, _) = kxp(&["generate", "--curve", flag], "");
        assert_ne!(again, private, "every key is new");
    }
}

#[test]
fn public_refuses_what_is_not_a_private_jwk() {
    let (_, private, _) = kxp(&["generate"], "");
    let (_, public, _) = kxp(&["public"], &private);
    let (code, out, err) = kxp(&["public"], &public);
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert!(err.contains("not_private"), "{err}");
    let (code, _, err) = kxp(&["public"], "not json");
    assert_eq!(code, 1);
    assert!(err.contains("invalid_json"), "{err}");
}

//! Endpoints' TLS: a client certificate presented on every attempt (mutual TLS), CA
//! certificates that replace the public roots for one endpoint (a private PKI), and the
//! endpoint's own certificate as handshakes show it ([`Watched`]).
//!
//! [`describe`] checks an endpoint's `tls` on the way in (PEM that reads, a key that matches
//! its certificate, nothing expired) and says what answers show of it. [`Clients`] keeps one
//! HTTP client per (endpoint, TLS material) in a bounded LRU: each is built like the shared
//! client (the address guard's resolver, no redirects, its egress proxy if any), with the
//! endpoint's identity and roots.

use std::collections::HashMap;
use std::sync::Mutex;

use kxp_api::{CertificateInfo, EndpointTls, EndpointTlsView, Timestamp};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2_std::{Digest, Sha256};
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::engine::dispatch::{self, GuardedClient};
use crate::engine::egress;
use crate::model::{EndpointId, Failure, FailureKind};
use crate::store::SeenCertificate;

/// The most PEM text of each part of an endpoint's `tls` (a chain or a CA bundle of a few
/// dozen certificates).
const MAX_PEM: usize = 64 * 1024;

/// How many per-endpoint clients a process keeps (each holds its connection pool).
const MAX_CLIENTS: usize = 1000;

/// The certificates of a PEM text, in order; an error says which block does not read.
fn certificates(field: &str, pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{field}: not PEM certificates ({e})"))?;
    if certs.is_empty() {
        return Err(format!("{field}: no `BEGIN CERTIFICATE` block"));
    }
    Ok(certs)
}

/// What answers show of a certificate, checked unexpired at `now_ms`.
fn info(field: &str, der: &CertificateDer<'_>, now_ms: i64) -> Result<CertificateInfo, String> {
    let (_, cert) = X509Certificate::from_der(der.as_ref())
        .map_err(|e| format!("{field}: not an X.509 certificate ({e})"))?;
    let not_after = cert.validity().not_after.timestamp().saturating_mul(1000);
    let subject = cert.subject().to_string();
    if not_after <= now_ms {
        return Err(format!(
            "{field}: the certificate `{subject}` expired on {}",
            Timestamp::from_unix_ms(not_after)
        ));
    }
    Ok(CertificateInfo {
        subject,
        issuer: cert.issuer().to_string(),
        not_after: Timestamp::from_unix_ms(not_after),
        sha256: hex::encode(Sha256::digest(der.as_ref())),
    })
}

/// Checks an endpoint's `tls` at `now_ms` and says what answers show of it: certificates that
/// read and have not expired, a client certificate with its key and a key that matches it.
pub(crate) fn describe(tls: &EndpointTls, now_ms: i64) -> Result<EndpointTlsView, String> {
    for (field, pem) in [
        ("tls.client_certificate", tls.client_certificate.as_deref()),
        (
            "tls.client_key",
            tls.client_key.as_ref().map(|k| k.expose()),
        ),
        ("tls.ca_certificates", tls.ca_certificates.as_deref()),
    ] {
        if pem.is_some_and(|pem| pem.len() > MAX_PEM) {
            return Err(format!("{field} must be at most {MAX_PEM} bytes"));
        }
    }
    let client_certificate = match (&tls.client_certificate, &tls.client_key) {
        (None, None) => None,
        (Some(_), None) => return Err("tls.client_key is missing beside the certificate".into()),
        (None, Some(_)) => return Err("tls.client_certificate is missing beside the key".into()),
        (Some(pem), Some(key)) => {
            let chain = certificates("tls.client_certificate", pem)?;
            let key = PrivateKeyDer::from_pem_slice(key.expose().as_bytes()).map_err(|_| {
                "tls.client_key: not a PEM private key (PKCS#8, PKCS#1 or SEC1)".to_owned()
            })?;
            let leaf = info("tls.client_certificate", &chain[0], now_ms)?;
            let provider = rustls::crypto::aws_lc_rs::default_provider();
            let signing = provider
                .key_provider
                .load_private_key(key)
                .map_err(|e| format!("tls.client_key: {e}"))?;
            rustls::sign::CertifiedKey::new(chain, signing)
                .keys_match()
                .map_err(|_| "tls.client_key does not match tls.client_certificate".to_owned())?;
            Some(leaf)
        }
    };
    let ca_certificates = match &tls.ca_certificates {
        None => Vec::new(),
        Some(pem) => certificates("tls.ca_certificates", pem)?
            .iter()
            .map(|der| info("tls.ca_certificates", der, now_ms))
            .collect::<Result<_, _>>()?,
    };
    Ok(EndpointTlsView {
        client_certificate,
        ca_certificates,
    })
}

/// What distinguishes one endpoint's TLS material from another's: a changed certificate, key
/// or CA makes a new client.
fn version(tls: &EndpointTls) -> [u8; 32] {
    let mut hash = Sha256::new();
    for part in [
        tls.client_certificate.as_deref(),
        tls.client_key.as_ref().map(|k| k.expose()),
        tls.ca_certificates.as_deref(),
    ] {
        let part = part.unwrap_or("\0");
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    hash.finalize().into()
}

/// Builds the client for `tls`: the shared client's settings (`base`: its guard, its egress
/// proxy) with the endpoint's identity and roots.
fn build(base: &GuardedClient, tls: &EndpointTls) -> Result<GuardedClient, Failure> {
    let failed = |why: String| Failure::new(FailureKind::Request, format!("tls: {why}"));
    let identity = match (&tls.client_certificate, &tls.client_key) {
        (Some(cert), Some(key)) => {
            let pem = zeroize::Zeroizing::new(format!("{}\n{cert}", key.expose()));
            Some(reqwest::Identity::from_pem(pem.as_bytes()).map_err(|e| failed(e.to_string()))?)
        }
        _ => None,
    };
    let roots = match &tls.ca_certificates {
        Some(pem) => Some(
            reqwest::Certificate::from_pem_bundle(pem.as_bytes())
                .map_err(|e| failed(e.to_string()))?,
        ),
        None => None,
    };
    let client = dispatch::client_with(base.guard().clone(), identity, roots)
        .map_err(|e| failed(e.to_string()))?;
    let Some(egress) = base.egress() else {
        return Ok(client);
    };
    // The same material for the tunnels' TLS.
    let identity = match (&tls.client_certificate, &tls.client_key) {
        (Some(cert), Some(key)) => Some((
            certificates("tls.client_certificate", cert).map_err(&failed)?,
            PrivateKeyDer::from_pem_slice(key.expose().as_bytes())
                .map_err(|_| failed("tls.client_key: not a PEM private key".to_owned()))?,
        )),
        _ => None,
    };
    let roots = match &tls.ca_certificates {
        Some(pem) => Some(certificates("tls.ca_certificates", pem).map_err(&failed)?),
        None => None,
    };
    let config = egress::tls_config(identity, roots).map_err(failed)?;
    Ok(client.through(egress.clone(), config))
}

/// Per-endpoint clients for endpoints with `tls`, at most [`MAX_CLIENTS`], the least recently
/// used dropped first.
#[derive(Debug, Default)]
pub(crate) struct Clients {
    clients: Mutex<Lru>,
}

#[derive(Debug, Default)]
struct Lru {
    entries: HashMap<(EndpointId, [u8; 32]), (GuardedClient, u64)>,
    clock: u64,
}

impl Clients {
    /// The client for attempts to `endpoint_id` with `tls`, built now if there is none.
    pub(crate) fn client(
        &self,
        base: &GuardedClient,
        endpoint_id: &EndpointId,
        tls: &EndpointTls,
    ) -> Result<GuardedClient, Failure> {
        let key = (endpoint_id.clone(), version(tls));
        {
            let mut lru = self.clients.lock().unwrap_or_else(|e| e.into_inner());
            lru.clock += 1;
            let clock = lru.clock;
            if let Some((client, used)) = lru.entries.get_mut(&key) {
                *used = clock;
                return Ok(client.clone());
            }
        }
        // Built outside the lock: loading roots and a key takes a moment.
        let client = build(base, tls)?;
        let mut lru = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        // An endpoint's older material is of no more use.
        lru.entries.retain(|(id, _), _| id != endpoint_id);
        if lru.entries.len() >= MAX_CLIENTS
            && let Some(oldest) = lru
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(key, _)| key.clone())
        {
            lru.entries.remove(&oldest);
        }
        let clock = lru.clock;
        lru.entries.insert(key, (client.clone(), clock));
        Ok(client)
    }

    /// A client for a one-off request with `tls` (the endpoint challenge), kept nowhere.
    pub(crate) fn one_off(
        base: &GuardedClient,
        tls: &EndpointTls,
    ) -> Result<GuardedClient, Failure> {
        build(base, tls)
    }
}

/// How often an endpoint's unchanged certificate is recorded again, so that its expiry notices
/// are queued as the days pass while deliveries flow.
const RECORD_AGAIN: std::time::Duration = std::time::Duration::from_secs(3600);

/// How many endpoints' certificates a process remembers before it starts again.
const MAX_WATCHED: usize = 10_000;

/// The endpoints' own certificates as this process last recorded them: a handshake showing the
/// same certificate within [`RECORD_AGAIN`] records nothing.
#[derive(Debug, Default)]
pub(crate) struct Watched {
    seen: Mutex<HashMap<EndpointId, (Vec<u8>, std::time::Instant)>>,
}

impl Watched {
    /// What to record of the certificate (DER) an attempt's handshake with `endpoint_id`
    /// showed: `None` when this process recorded the same one within the hour, or when it does
    /// not read.
    pub(crate) fn observe(&self, endpoint_id: &EndpointId, der: &[u8]) -> Option<SeenCertificate> {
        let now = crate::model::instant();
        {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((last, at)) = seen.get(endpoint_id)
                && last == der
                && now.duration_since(*at) < RECORD_AGAIN
            {
                return None;
            }
            if seen.len() >= MAX_WATCHED {
                seen.clear();
            }
            seen.insert(endpoint_id.clone(), (der.to_vec(), now));
        }
        let (_, cert) = X509Certificate::from_der(der).ok()?;
        Some(SeenCertificate {
            issuer: cert.issuer().to_string(),
            not_after: cert.validity().not_after.timestamp().saturating_mul(1000),
        })
    }

    /// Forgets what was recorded of `endpoint_id`, so the next handshake records again (the
    /// recording failed).
    pub(crate) fn forget(&self, endpoint_id: &EndpointId) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.remove(endpoint_id);
    }
}

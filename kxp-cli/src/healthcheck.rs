//! `kxp healthcheck`: GET a probe and exit 0 on a 2xx answer, 1 otherwise. The container
//! image has no shell and no curl, so its `HEALTHCHECK` runs this (in exec form) against the
//! server's own `/readyz`.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use reqwest::Url;

use crate::config::Dur;

/// How much of a failing answer's body is printed: the probe's error is one short JSON object.
const SHOWN_BODY_BYTES: usize = 500;

#[derive(Args)]
pub(crate) struct HealthcheckArgs {
    /// The probe to read (`http://` only: it is this machine's own server). Default: `/readyz`
    /// at the address `kxp serve` listens on by `KXP_LISTEN` (an unspecified address such as
    /// `0.0.0.0` read as loopback), else at 127.0.0.1:8080.
    #[arg(long, value_name = "URL")]
    url: Option<Url>,
    /// How long to wait for the whole answer.
    #[arg(long, value_name = "DURATION", default_value = "3s")]
    timeout: Dur,
}

pub(crate) fn healthcheck(args: HealthcheckArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let url = match args.url {
        Some(url) => url,
        None => match own_readyz(std::env::var("KXP_LISTEN").ok().as_deref()) {
            Ok(url) => url,
            Err(why) => {
                eprintln!("error: {why}");
                return ExitCode::from(2);
            }
        },
    };
    match runtime.block_on(probe(&url, args.timeout.0)) {
        Ok(status) => {
            println!("{status}");
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("unhealthy: {why}");
            ExitCode::FAILURE
        }
    }
}

/// `/readyz` of the server listening at `listen` (`KXP_LISTEN`'s value), or at 127.0.0.1:8080.
fn own_readyz(listen: Option<&str>) -> Result<Url, String> {
    let mut addr: SocketAddr = match listen.filter(|l| !l.is_empty()) {
        Some(listen) => listen
            .parse()
            .map_err(|_| format!("KXP_LISTEN={listen:?} is not an address such as 0.0.0.0:8080"))?,
        None => SocketAddr::from(([127, 0, 0, 1], 8080)),
    };
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            SocketAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
        });
    }
    Url::parse(&format!("http://{addr}/readyz")).map_err(|e| e.to_string())
}

/// The probe's status line when it answers 2xx, why not otherwise.
async fn probe(url: &Url, timeout: Duration) -> Result<String, String> {
    if url.scheme() != "http" {
        return Err(format!(
            "{url}: only http:// probes (the server on this machine)"
        ));
    }
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| e.to_string())?;
    let response = client
        .get(url.clone())
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    let shown: String = body.chars().take(SHOWN_BODY_BYTES).collect();
    if status.is_success() {
        Ok(format!("{status}"))
    } else {
        Err(format!("{url}: {status} {shown}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_probe_follows_the_listen_address() {
        let url = |listen| own_readyz(listen).map(|u| u.to_string());
        assert_eq!(url(None).unwrap(), "http://127.0.0.1:8080/readyz");
        assert_eq!(
            url(Some("0.0.0.0:9000")).unwrap(),
            "http://127.0.0.1:9000/readyz"
        );
        assert_eq!(url(Some("[::]:9000")).unwrap(), "http://[::1]:9000/readyz");
        assert_eq!(url(Some("10.0.0.5:80")).unwrap(), "http://10.0.0.5/readyz");
        assert!(
            url(Some("localhost:80"))
                .unwrap_err()
                .contains("KXP_LISTEN")
        );
    }
}

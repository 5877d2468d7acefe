//! The example receivers as a merchant runs them: each binary is started as a real process
//! (a temporary working directory, a free port on 127.0.0.1), and spoken to over HTTP only.
//!
//! Every scenario is written once, as `async fn scenario(bin: Bin)`, and [`both_binaries!`]
//! makes it two tests, `scenario::axum` and `scenario::actix`.

// Helpers outside #[test] functions unwrap too: in a test, a panic is the failure report.
#![allow(clippy::unwrap_used)]

/// Instantiates each named scenario of the calling module for both receivers.
macro_rules! both_binaries {
    ($($scenario:ident),* $(,)?) => {
        $(
            mod $scenario {
                #[tokio::test]
                async fn axum() {
                    super::$scenario(crate::process::Bin::Axum).await;
                }

                #[tokio::test]
                async fn actix() {
                    super::$scenario(crate::process::Bin::Actix).await;
                }
            }
        )*
    };
}

mod crash;
mod postgres;
mod process;
mod receiver;

//! The example receivers as a merchant runs them: each binary is started as a real process and
//! spoken to over HTTP only. `conformance` runs the shared receiver suite of
//! `kxp_testkit::conformance` against both; `settings` checks what only a process has (its
//! environment, its working directory).

// Helpers outside #[test] functions unwrap too: in a test, a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// Instantiates each named scenario of the calling module for both receivers.
macro_rules! both_binaries {
    ($($scenario:ident),* $(,)?) => {
        $(
            mod $scenario {
                #[tokio::test]
                async fn axum() {
                    super::$scenario(crate::binaries::Bin::Axum).await;
                }

                #[tokio::test]
                async fn actix() {
                    super::$scenario(crate::binaries::Bin::Actix).await;
                }
            }
        )*
    };
}

mod binaries;
mod conformance;
mod disk_full;
mod ordered;
mod pull;
mod settings;

//! A `nats-server` of one test's own ([`NatsServer`]), to stop and start again.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{PATIENCE, unavailable};

/// A `nats-server` of one test's own, with JetStream, on a free loopback port and a storage
/// directory of its own (deleted with it); [`NatsServer::stop`] and [`NatsServer::start`] take
/// it down and bring it back on the same port with the same storage, streams and consumers
/// kept. Killed when dropped.
#[derive(Debug)]
pub struct NatsServer {
    binary: PathBuf,
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

/// Where the `nats-server` binary is: `$KXP_NATS_SERVER`, `/usr/sbin/nats-server`, or the
/// first `nats-server` on the `PATH`.
fn nats_server_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("KXP_NATS_SERVER") {
        return Some(PathBuf::from(path));
    }
    let candidates = std::iter::once(PathBuf::from("/usr/sbin/nats-server")).chain(
        std::env::var_os("PATH")
            .map(|path| {
                std::env::split_paths(&path)
                    .map(|dir| dir.join("nats-server"))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default(),
    );
    candidates.into_iter().find(|path| path.is_file())
}

impl NatsServer {
    /// Starts a private server; `None` (after a `SKIPPED (NATS server): …` line) when there is
    /// no `nats-server` binary and [`REQUIRE_ENV`](super::REQUIRE_ENV) is not `1`. Panics if it
    /// does not come up.
    pub fn spawn() -> Option<NatsServer> {
        let Some(binary) = nats_server_binary() else {
            return unavailable("NATS server", "no nats-server binary (set KXP_NATS_SERVER)");
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .unwrap_or_else(|e| panic!("no free loopback port: {e}"))
            .port();
        let dir = tempfile::Builder::new()
            .prefix("kxp-nats-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let mut server = NatsServer {
            binary,
            port,
            dir,
            child: None,
        };
        server.start();
        Some(server)
    }

    /// The server's URL, `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's storage directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Whether the server runs (between [`NatsServer::start`] and [`NatsServer::stop`]).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Starts the server again (a no-op if it runs) on the same port and storage, and waits
    /// until it accepts connections. Panics if it does not within 20 s.
    pub fn start(&mut self) {
        if self.child.is_some() {
            return;
        }
        let storage = self.dir.path().join("jetstream");
        let log = self.dir.path().join("nats-server.log");
        let mut child = Command::new(&self.binary)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(&storage)
            .arg("-l")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.binary.display()));
        let start = Instant::now();
        let addr = format!("127.0.0.1:{}", self.port);
        // A port another process took in the meantime would also accept: the server's INFO
        // line tells them apart, and a server that exited is reported with its log.
        while !says_info(&addr) {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "nats-server exited ({status}) on port {}: {}",
                    self.port,
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            if start.elapsed() > PATIENCE {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "nats-server did not come up on port {} within {PATIENCE:?}",
                    self.port
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child = Some(child);
    }

    /// Stops the server with SIGTERM and waits until it has exited (a no-op if it does not run).
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let terminated = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .is_ok_and(|status| status.success());
        if !terminated {
            let _ = child.kill();
        }
        let start = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if start.elapsed() < PATIENCE => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
            }
        }
    }
}

/// Whether a NATS server answers at `addr` with its `INFO` line.
fn says_info(addr: &str) -> bool {
    use std::io::Read;
    let Ok(addr) = addr.parse::<SocketAddr>() else {
        return false;
    };
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let mut buf = [0u8; 4];
    stream.read_exact(&mut buf).is_ok() && &buf == b"INFO"
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    use crate::brokers::Nats;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_private_nats_server_keeps_its_streams_across_a_restart() {
        let Some(mut server) = NatsServer::spawn() else {
            return;
        };
        let nats = Nats::connect_to(&server.url()).await;
        nats.publish(b"before", None).await;
        server.stop();
        assert!(!server.is_running());
        assert!(!says_info(&format!("127.0.0.1:{}", server.port())));
        server.start();
        nats.wait_connected(PATIENCE).await;
        nats.publish(b"after", None).await;
        assert_eq!(nats.stream_messages().await, 2);
        nats.delete().await;
    }
}

//! A small tmpfs that only the processes a test starts in it can see: for the tests of what a
//! full disk does to a store, without filling the machine's disk or touching anyone else's files.
//!
//! The tmpfs is mounted in a mount namespace of its own (`unshare -m`, which needs root), over a
//! directory that stays empty for everyone else. A holder process keeps the namespace, so the
//! processes started in it ([`Tmpfs::spawn`], through `nsenter`) can be killed and started again
//! on the same files; the test fills and frees it through `nsenter` too, and reads its files
//! with a process of its own started there. (`/proc/<holder>/root/…` does not do for SQLite,
//! which resolves that link to `/` and opens the path in the caller's namespace.) Where mount
//! namespaces are not permitted, [`Tmpfs::permitted`] says so (loudly, on stderr) and the test should pass
//! without running.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A tmpfs mounted over a directory in a mount namespace of its own; unmounted (its holder
/// killed) when dropped.
#[derive(Debug)]
pub struct Tmpfs {
    holder: Child,
    dir: PathBuf,
}

impl Tmpfs {
    /// Whether mount namespaces can be made here; `false` after saying on stderr that
    /// `scenario` is skipped.
    pub fn permitted(scenario: &str) -> bool {
        let permitted = Command::new("unshare")
            .args(["-m", "--propagation", "private", "true"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !permitted {
            eprintln!("SKIPPED ({scenario}): `unshare -m` is not permitted here (it needs root)");
        }
        permitted
    }

    /// Mounts a tmpfs of `size` (such as `4m`) over `dir`, seen only by the processes started
    /// with [`spawn`](Tmpfs::spawn) or [`command`](Tmpfs::command).
    pub fn mount(dir: &Path, size: &str) -> Tmpfs {
        let mut holder = Command::new("unshare")
            .args(["-m", "--propagation", "private", "/bin/sh", "-c"])
            .arg(format!(
                r#"mount -t tmpfs -o size={size} tmpfs "$1" || exit 97; echo mounted; exec sleep 86400"#
            ))
            .arg("sh")
            .arg(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start unshare: {e}"));
        // Wait for the mount: a process entering the namespace before it would see the bare
        // directory and write to the real disk.
        let mut said = [0u8; 8];
        let mounted = holder
            .stdout
            .take()
            .is_some_and(|mut out| out.read_exact(&mut said).is_ok() && &said == b"mounted\n");
        assert!(mounted, "the tmpfs over {} was not mounted", dir.display());
        Tmpfs {
            holder,
            dir: dir.to_path_buf(),
        }
    }

    /// `command`'s program with its arguments and environment, to run in the namespace: the
    /// caller sets its standard streams and starts it. Killing it leaves the tmpfs as it is.
    pub fn command(&self, command: &Command) -> Command {
        let mut inside = Command::new("nsenter");
        inside
            .args(["-t", &self.holder.id().to_string(), "-m", "--"])
            .arg(command.get_program())
            .args(command.get_args());
        for (key, value) in command.get_envs() {
            match value {
                Some(value) => inside.env(key, value),
                None => inside.env_remove(key),
            };
        }
        inside
    }

    /// Starts [`command`](Tmpfs::command)`(command)` with this stdout and no stderr; the process
    /// is killed when the returned value is dropped.
    pub fn spawn(&self, command: &Command, stdout: Stdio) -> Confined {
        let child = self
            .command(command)
            .stdout(stdout)
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start nsenter: {e}"));
        Confined(child)
    }

    /// Fills the tmpfs to the last byte (a file `filler` in it).
    pub fn fill(&self) {
        self.inside(r#"cat /dev/zero > "$1/filler" 2>/dev/null; sync"#);
    }

    /// Frees what [`fill`](Tmpfs::fill) took.
    pub fn free(&self) {
        self.inside(r#"rm -f "$1/filler"; sync"#);
    }

    /// Runs `script` in the namespace, with `$1` the directory.
    fn inside(&self, script: &str) {
        let status = self
            .command(
                Command::new("/bin/sh")
                    .arg("-c")
                    .arg(script)
                    .arg("sh")
                    .arg(&self.dir),
            )
            .stderr(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("cannot run nsenter: {e}"));
        // Filling ends with "no space left", which is the point; only a missing nsenter fails.
        assert!(status.code().is_some(), "nsenter did not run");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// A process started in a [`Tmpfs`] (or [`Confined::new`]); killed when dropped.
#[derive(Debug)]
pub struct Confined(Child);

impl Confined {
    /// A process started some other way, to be killed when dropped like the others.
    pub fn new(child: Child) -> Confined {
        Confined(child)
    }

    /// The process.
    pub fn child(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Confined {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

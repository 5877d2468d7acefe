//! A process whose data directory is a small tmpfs of its own: for the tests of what a full disk
//! does to a store, without filling the machine's disk or touching anyone else's files.
//!
//! The tmpfs is mounted in a mount namespace of the process's own (`unshare -m`, which needs
//! root), over a directory that stays empty for everyone else; the test fills and frees it
//! through `nsenter`. Where mount namespaces are not permitted, [`Confined::permitted`] says so
//! (loudly, on stderr) and the test should pass without running.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A child process with a tmpfs at its directory; killed when dropped.
#[derive(Debug)]
pub struct Confined {
    child: Child,
    dir: PathBuf,
}

impl Confined {
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

    /// Starts `command`'s program with its arguments and environment, with a tmpfs of `size`
    /// (such as `4m`) mounted over `dir` in its own mount namespace. `command` is only read for
    /// its program, arguments, environment and stdout; stderr is discarded.
    pub fn spawn(dir: &Path, size: &str, command: &Command, stdout: Stdio) -> Confined {
        let mut confined = Command::new("unshare");
        confined
            .args(["-m", "--propagation", "private", "/bin/sh", "-c"])
            .arg(format!(
                r#"mount -t tmpfs -o size={size} tmpfs "$1" || exit 97; shift; exec "$@""#
            ))
            .arg("sh")
            .arg(dir)
            .arg(command.get_program())
            .args(command.get_args());
        for (key, value) in command.get_envs() {
            match value {
                Some(value) => confined.env(key, value),
                None => confined.env_remove(key),
            };
        }
        let child = confined
            .stdout(stdout)
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start unshare: {e}"));
        Confined {
            child,
            dir: dir.to_path_buf(),
        }
    }

    /// The process.
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Fills the tmpfs to the last byte (a file `filler` in it).
    pub fn fill(&self) {
        self.inside(r#"cat /dev/zero > "$1/filler" 2>/dev/null; sync"#);
    }

    /// Frees what [`fill`](Confined::fill) took.
    pub fn free(&self) {
        self.inside(r#"rm -f "$1/filler"; sync"#);
    }

    /// Runs `script` in the process's mount namespace, with `$1` the directory.
    fn inside(&self, script: &str) {
        let status = Command::new("nsenter")
            .args([
                "-t",
                &self.child.id().to_string(),
                "-m",
                "--",
                "/bin/sh",
                "-c",
            ])
            .arg(script)
            .arg("sh")
            .arg(&self.dir)
            .stderr(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("cannot run nsenter: {e}"));
        // Filling ends with "no space left", which is the point; only a missing nsenter fails.
        assert!(status.code().is_some(), "nsenter did not run");
    }
}

impl Drop for Confined {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

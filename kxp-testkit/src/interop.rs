//! The independent libraries `.ci/interop-install` puts in `KXP_INTEROP_DIR` (a Python venv
//! and Node.js packages, at pinned versions), and the scripts of `kxp-testkit/interop` that
//! drive them. A test that needs them is skipped, loudly, where they are not installed, unless
//! `KXP_REQUIRE_INTEROP=1` (as `.ci/run` sets) says it must run.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The installed libraries.
pub struct Interop {
    dir: PathBuf,
}

impl Interop {
    /// The libraries, or `None` after saying loudly that the test of `what` is skipped; with
    /// `KXP_REQUIRE_INTEROP=1` a missing install panics instead.
    pub fn find(what: &str) -> Option<Interop> {
        let dir = std::env::var_os("KXP_INTEROP_DIR").map(PathBuf::from);
        let installed = dir
            .filter(|d| d.join("venv/bin/python").exists() && d.join("node/node_modules").exists());
        if installed.is_none() {
            let why = "KXP_INTEROP_DIR does not name an install of .ci/interop-install";
            assert!(
                std::env::var_os("KXP_REQUIRE_INTEROP").is_none(),
                "{what}: {why}"
            );
            eprintln!(
                "SKIPPED (loudly): {what}: {why} (run `.ci/interop-install DIR`, then set \
                 KXP_INTEROP_DIR=DIR)"
            );
        }
        installed.map(|dir| Interop { dir })
    }

    fn script(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("interop")
            .join(name)
    }

    /// Runs the Python script `name` of `kxp-testkit/interop` with `args`; its standard
    /// output.
    pub fn python(&self, name: &str, args: &[&OsStr]) -> String {
        let mut command = Command::new(self.dir.join("venv/bin/python"));
        command.arg(Interop::script(name)).args(args);
        run(command, name)
    }

    /// Runs the Node.js module `name` of `kxp-testkit/interop` with `args`; its standard
    /// output. The module is read from standard input in the packages' directory, so that its
    /// imports resolve there.
    pub fn node(&self, name: &str, args: &[&OsStr]) -> String {
        let script =
            std::fs::File::open(Interop::script(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut command = Command::new("node");
        command
            .args(["--input-type=module", "-"])
            .args(args)
            .current_dir(self.dir.join("node"))
            .stdin(script);
        run(command, name)
    }
}

fn run(mut command: Command, name: &str) -> String {
    let output = command.output().unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(
        output.status.success(),
        "{name}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap_or_else(|e| panic!("{name}: {e}"))
}

//! CPU time and peak memory of processes, from `/proc` (Linux only).

use std::fs;

/// Clock ticks per second of `utime`/`stime` in `/proc/<pid>/stat`.
pub fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

/// The fields of `/proc/<pid>/stat` after the command name: `[0]` is the state (field 3).
struct Stat {
    comm: String,
    fields: Vec<u64>,
}

fn stat(pid: u32) -> Option<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text[open + 1..close].to_owned();
    // Field 3 (the state) is a letter: keep it as 0 so the indices stay those of proc(5) - 3.
    let fields = text[close + 1..]
        .split_whitespace()
        .map(|f| f.parse::<u64>().unwrap_or(0))
        .collect();
    Some(Stat { comm, fields })
}

impl Stat {
    /// utime + stime (fields 14, 15), in ticks.
    fn own(&self) -> u64 {
        self.fields.get(11).copied().unwrap_or(0) + self.fields.get(12).copied().unwrap_or(0)
    }
    /// cutime + cstime (fields 16, 17): children that exited and were waited for, in ticks.
    fn children(&self) -> u64 {
        self.fields.get(13).copied().unwrap_or(0) + self.fields.get(14).copied().unwrap_or(0)
    }
}

/// CPU seconds (user + system, all threads) a process has used so far; 0 once it is gone.
pub fn cpu_seconds(pid: u32) -> f64 {
    stat(pid).map_or(0.0, |s| s.own() as f64 / ticks_per_second())
}

/// CPU seconds of every process named `postgres` on the machine, plus their waited-for
/// children's (the postmaster's `cutime` holds the backends that have exited), so a delta over
/// a run counts backends that came and went during it. Includes other users of the server.
pub fn all_postgres_cpu_seconds() -> f64 {
    let ticks: u64 = processes()
        .filter(|s| s.comm == "postgres")
        .map(|s| s.own() + s.children())
        .sum();
    ticks as f64 / ticks_per_second()
}

/// CPU seconds of a PostgreSQL server: its postmaster's own and its waited-for children's
/// (backends that exited), plus every live child's (the backends and background processes).
pub fn tree_cpu_seconds(postmaster: u32) -> f64 {
    let Some(root) = stat(postmaster) else {
        return 0.0;
    };
    // Field 4, the parent's pid, is fields[1].
    let children: u64 = processes()
        .filter(|s| s.fields.get(1).copied() == Some(u64::from(postmaster)))
        .map(|s| s.own())
        .sum();
    (root.own() + root.children() + children) as f64 / ticks_per_second()
}

/// Every process's `stat` (at most 100,000).
fn processes() -> impl Iterator<Item = Stat> {
    fs::read_dir("/proc")
        .into_iter()
        .flat_map(|dir| dir.flatten())
        .take(100_000)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(stat)
}

/// Peak resident set size (`VmHWM`) in KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// This process's own CPU seconds (user + system).
pub fn self_cpu_seconds() -> f64 {
    cpu_seconds(std::process::id())
}

/// The 1-minute load average.
pub fn load_average() -> f64 {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// `model name` from `/proc/cpuinfo` and the number of CPUs online.
pub fn machine() -> String {
    let model = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{model}, {cpus} CPUs")
}

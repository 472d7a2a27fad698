//! CPU accounting from procfs: a process's (all threads, live and exited) or
//! one thread's user+system time from `/proc/<pid>/stat`, and pinning the load
//! generator to a CPU. Linux only, like the project. Not here: what the numbers are
//! divided by (`mod`), the load average (`memfleet_results::provenance`).

use std::fs;
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// Whose CPU time to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// A whole process.
    Process(u32),
    /// The calling thread (the load generator's event loop).
    ThisThread,
}

impl Who {
    fn stat_path(self) -> String {
        match self {
            Who::Process(pid) => format!("/proc/{pid}/stat"),
            Who::ThisThread => "/proc/thread-self/stat".to_string(),
        }
    }
}

/// User and system CPU time consumed so far.
pub fn cpu_time(who: Who) -> Result<Duration> {
    let path = who.stat_path();
    let stat = fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let ticks = parse_stat_ticks(&stat).with_context(|| format!("parsing {path}"))?;
    Ok(ticks_to_duration(ticks, clock_ticks_per_second()))
}

/// utime + stime, in clock ticks, of a `/proc/<pid>/stat` line.
pub fn parse_stat_ticks(stat: &str) -> Result<u64> {
    // Field 2, the command name, is in parentheses and may itself hold spaces and
    // parentheses; everything after the *last* ')' is space-separated.
    let Some(close) = stat.rfind(')') else {
        bail!("no ')' closing the command name");
    };
    let rest: Vec<&str> = stat[close + 1..].split_ascii_whitespace().collect();
    // rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    let field = |n: usize| -> Result<u64> {
        let s = rest
            .get(n - 3)
            .with_context(|| format!("only {} fields", rest.len() + 2))?;
        s.parse()
            .with_context(|| format!("field {n} is not a number: {s:?}"))
    };
    Ok(field(14)? + field(15)?)
}

fn ticks_to_duration(ticks: u64, per_second: u64) -> Duration {
    Duration::from_nanos((u128::from(ticks) * 1_000_000_000 / u128::from(per_second)) as u64)
}

/// The kernel's USER_HZ (almost always 100): /proc times are in these units.
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf only reads a configuration value; no pointers are involved.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as u64
    } else {
        100
    }
}

/// Number of CPUs the kernel has online.
pub fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Restores the calling thread's CPU affinity when dropped.
pub struct Pinned {
    saved: libc::cpu_set_t,
}

/// Pins the calling thread to `cpu` until the returned guard is dropped.
pub fn pin_this_thread(cpu: usize) -> Result<Pinned> {
    // SAFETY: cpu_set_t is a plain bitmask for which all-zero is a valid (empty) value.
    let mut saved: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `saved` is a valid, writable cpu_set_t and the size passed is its size.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut saved) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("sched_getaffinity");
    }
    set_affinity_one(cpu).with_context(|| format!("pinning the load generator to CPU {cpu}"))?;
    Ok(Pinned { saved })
}

fn set_affinity_one(cpu: usize) -> Result<()> {
    // SAFETY: as above, all-zero is a valid empty cpu_set_t.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if cpu >= libc::CPU_SETSIZE as usize {
        bail!("CPU {cpu} is beyond what a cpu_set_t holds");
    }
    // SAFETY: `cpu` is below CPU_SETSIZE (checked above), so the bit is inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    set_affinity(&set)
}

fn set_affinity(set: &libc::cpu_set_t) -> Result<()> {
    // SAFETY: `set` points to a valid cpu_set_t of the size passed; pid 0 is this thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // Failing to restore only leaves this thread pinned; nothing to report to.
        let _ = set_affinity(&self.saved);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_a_tricky_command_name() {
        // A real memcached line, with the name replaced by one holding ") (" and spaces.
        let line = "4242 (mem) (cached x) S 1 4242 4242 0 -1 4194624 310 0 0 0 \
                    1234 567 0 0 20 0 10 0 123456 1000000 500 18446744073709551615\n";
        assert_eq!(parse_stat_ticks(line).unwrap(), 1234 + 567);
        assert!(parse_stat_ticks("4242 (x) S 1 2").is_err());
        assert!(parse_stat_ticks("4242 x S").is_err());
        let bad = "1 (a) S 1 1 1 0 -1 0 0 0 0 0 x 5 0";
        assert!(parse_stat_ticks(bad).is_err());
    }

    #[test]
    fn ticks_convert_exactly() {
        assert_eq!(ticks_to_duration(150, 100), Duration::from_millis(1500));
        assert_eq!(ticks_to_duration(3, 1000), Duration::from_millis(3));
    }

    #[test]
    fn own_cpu_time_is_readable_and_grows() {
        let before = cpu_time(Who::ThisThread).unwrap();
        let me = cpu_time(Who::Process(std::process::id())).unwrap();
        assert!(me >= before);
        // Spin until the (tick-granular) counter moves; on a busy machine that can take
        // longer than the tick itself, hence the generous wall-clock bound.
        let start = std::time::Instant::now();
        let mut x = 0u64;
        let mut after = before;
        while after == before && start.elapsed() < Duration::from_secs(10) {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            after = cpu_time(Who::ThisThread).unwrap();
        }
        assert!(after > before, "{before:?} -> {after:?}");
    }
}

//! The machine `memfleet bench scale` runs on: the CPUs this process may use (the ones it
//! pins threads and processes to, in order), the CPU model, the core count, and the
//! `taskset` list of a set of CPUs. Not here: pinning a thread (`memfleet_loadgen::cpu`).

use anyhow::{Context, Result};

/// The CPUs this process may run on, ascending (its affinity mask: in a container with a
/// cpuset these need not start at 0).
pub fn allowed_cpus() -> Result<Vec<usize>> {
    // SAFETY: cpu_set_t is a plain bitmask for which all-zero is a valid (empty) value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t and the size passed is its size.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("sched_getaffinity");
    }
    // SAFETY: every index tested is below CPU_SETSIZE, inside `set`.
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect();
    anyhow::ensure!(!cpus.is_empty(), "this process may run on no CPU");
    Ok(cpus)
}

/// What the table's header says of the machine.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Machine {
    /// CPUs this process may use.
    pub cpus: Vec<usize>,
    /// CPUs online (the kernel's count).
    pub online: usize,
    /// `model name` of /proc/cpuinfo.
    pub model: String,
    /// /proc/loadavg's three averages when the run started.
    pub load_average_at_start: String,
    /// The kernel (`/proc/sys/kernel/osrelease`).
    pub kernel: String,
}

impl Machine {
    /// This machine, now.
    pub fn now() -> Result<Machine> {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        Ok(Machine {
            cpus: allowed_cpus()?,
            online: memfleet_loadgen::cpu::online_cpus(),
            model: cpu_model(&cpuinfo),
            load_average_at_start: memfleet_results::provenance::load_average(),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
        })
    }

    /// One line: CPUs, model, kernel, load average.
    pub fn line(&self) -> String {
        format!(
            "{} CPUs usable ({}; {} online), {}, Linux {}, load average at start {}",
            self.cpus.len(),
            taskset_list(&self.cpus),
            self.online,
            self.model,
            self.kernel,
            self.load_average_at_start
        )
    }
}

/// The first `model name` of a /proc/cpuinfo text (or `unknown CPU model`).
fn cpu_model(cpuinfo: &str) -> String {
    cpuinfo
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == "model name").then(|| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU model".into())
}

/// `cpus` as `taskset -c` takes them: `0,1,2`.
pub fn taskset_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_model_and_the_cpus() {
        let info = "processor\t: 0\nvendor_id\t: X\nmodel name\t: AMD EPYC 9454\n";
        assert_eq!(cpu_model(info), "AMD EPYC 9454");
        assert_eq!(cpu_model(""), "unknown CPU model");
        let cpus = allowed_cpus().unwrap();
        assert!(!cpus.is_empty() && cpus.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(taskset_list(&[0, 2, 5]), "0,2,5");
    }
}

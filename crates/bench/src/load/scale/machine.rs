//! The machine `memfleet bench scale` runs on: the CPUs this process may use, in the order
//! threads and processes are pinned to them (one hardware thread of every physical core
//! first, then their SMT siblings), the CPU model, the core counts, and the `taskset` list
//! of a set of CPUs. Not here: pinning a thread (`memfleet_loadgen::cpu`).

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

/// The physical core (package, core id) of `cpu`, from sysfs.
fn core_of(cpu: usize) -> Option<(u32, u32)> {
    let read = |what: &str| -> Option<u32> {
        std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/{what}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    Some((read("physical_package_id")?, read("core_id")?))
}

/// `cpus` in pinning order, given each one's physical core (`None`: a core of its own):
/// the first hardware thread of every core, in CPU order, then the second ones, and so on;
/// and the number of physical cores.
fn pinning_order(
    cpus: &[usize],
    core: impl Fn(usize) -> Option<(u32, u32)>,
) -> (Vec<usize>, usize) {
    let mut seen: Vec<(u32, u32)> = Vec::new();
    let mut ranked: Vec<(usize, usize)> = Vec::new();
    for &cpu in cpus {
        let rank = match core(cpu) {
            Some(c) => {
                let rank = seen.iter().filter(|&&s| s == c).count();
                seen.push(c);
                rank
            }
            None => 0,
        };
        ranked.push((rank, cpu));
    }
    ranked.sort_unstable();
    let physical = ranked.iter().filter(|(rank, _)| *rank == 0).count();
    (ranked.into_iter().map(|(_, cpu)| cpu).collect(), physical)
}

/// What the table's header says of the machine.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Machine {
    /// CPUs this process may use, in pinning order (SMT siblings last).
    pub cpus: Vec<usize>,
    /// Physical cores among them.
    pub physical_cores: usize,
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
        let (cpus, physical_cores) = pinning_order(&allowed_cpus()?, core_of);
        Ok(Machine {
            cpus,
            physical_cores,
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
            "{} CPUs usable ({} in pinning order; {} physical cores; {} online), {}, Linux {}, \
             load average at start {}",
            self.cpus.len(),
            taskset_list(&self.cpus),
            self.physical_cores,
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

    #[test]
    fn smt_siblings_come_last() {
        // Four CPUs on two cores, siblings numbered 0/2 and 1/3 (as Linux numbers them).
        let core = |cpu: usize| Some((0, (cpu % 2) as u32));
        assert_eq!(pinning_order(&[0, 1, 2, 3], core), (vec![0, 1, 2, 3], 2));
        // Siblings numbered next to each other: 0/1 and 2/3.
        let core = |cpu: usize| Some((0, (cpu / 2) as u32));
        assert_eq!(pinning_order(&[0, 1, 2, 3], core), (vec![0, 2, 1, 3], 2));
        // Two packages with the same core ids; unknown topology: a core per CPU.
        let core = |cpu: usize| Some(((cpu / 2) as u32, 0));
        assert_eq!(pinning_order(&[0, 1, 2, 3], core), (vec![0, 2, 1, 3], 2));
        assert_eq!(pinning_order(&[4, 7], |_| None), (vec![4, 7], 2));
    }
}

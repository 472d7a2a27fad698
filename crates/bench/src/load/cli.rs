//! `memfleet bench <experiment>`: one subcommand per experiment, each with its own flags
//! (`Experiment`), running the chosen one (`run`), and the older command lines turned into
//! that form before clap reads them (`subcommand_argv`): `memfleet bench --scenario X ...`
//! is `memfleet bench X ...`, and `memfleet bench --flag ...` with no experiment named is
//! `memfleet bench load --flag ...`. The flags that lost their experiment prefix
//! (`--herd-invalidate` is herd's `--invalidate`) keep the old name as an alias.
//!
//! Not here: the flags themselves (the shared groups in `args`, each experiment's own in its
//! module) and what the experiments do.

use std::ffi::OsString;

use anyhow::Result;

use super::args::LoadArgs;
use super::{
    admission, client_bench, discovery, expiry, flash, gutter, herd, invalidation, migration,
    regions, replay, restart, scale, udp, warmup,
};

/// What `memfleet bench` runs.
// Parsed once per process: the size of its largest variant is no cost.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Experiment {
    /// The request mix at each pipeline depth against --spawn/--target servers: ops/s,
    /// latency percentiles, server CPU per operation (also `memfleet bench --spawn ...`).
    Load(LoadArgs),
    /// The hot-key thundering herd, with and without leases (Facebook §3.2.1).
    Herd(herd::HerdArgs),
    /// Get latency over TCP and over UDP at the same load (servers get `-U` on the same
    /// port number).
    Udp(udp::UdpArgs),
    /// Warm restart: fill a memfleet server that keeps its memory in a file, read every
    /// key, stop it with SIGUSR1, start it again, read every key again.
    Restart(restart::RestartArgs),
    /// A server of four killed behind a router, without and with a gutter pool: database
    /// load and client-visible failures per second, the gutter's hit rate.
    Gutter(gutter::GutterArgs),
    /// The client library straight to a server over TCP, over UDP, and through the router:
    /// latency and CPU per get of each part.
    Client(client_bench::ClientArgs),
    /// Commit-to-deleted latency of the invalidator, from a scratch PostgreSQL to two
    /// clusters.
    Invalidation(invalidation::InvalidationArgs),
    /// Trace replay at each --memory-sizes against fresh servers, look-aside: miss ratio per
    /// server and size (the sizing curve) and over the trace.
    Replay(replay::ReplayArgs),
    /// Facebook §4.3's cold cluster warm-up: an empty cluster behind a router's warmup
    /// route, with and without it: its hit rate and the database's queries per second.
    Warmup(warmup::WarmupArgs),
    /// Segcache §3.5's proactive expiration: bytes each --spawn/--target server holds in
    /// expired items per second while short- and long-TTL items are written.
    Expiry(expiry::ExpiryArgs),
    /// A pool of 32+ members found through DNS under look-aside load while a tenth of them
    /// are replaced (in place, then with new names): keys moved against the ideal, failed
    /// requests, the time the router takes to follow each change.
    Discovery(discovery::DiscoveryArgs),
    /// Facebook §5: a master and a replica region (PostgreSQL 16 primary and standby),
    /// the replica's invalidator reading its standby, the standby's replay held back:
    /// stale reads, read-your-writes with and without remote markers, replication and
    /// invalidation lag, lost invalidations after an invalidator and a standby restart.
    Regions(regions::RegionsArgs),
    /// Throughput against cores (issue 31): the engine in-process with 1..16 pinned
    /// threads, memfleet server and memcached with k workers, memfleet router against k
    /// nutcracker processes; one table, scaling efficiency, contention counters.
    Scale(scale::ScaleArgs),
    /// A migration through the router (issue 29): shadow a new cluster until its replies
    /// match, migrate, drain the old one with a null route, under look-aside load with
    /// deletes: client errors, stale reads, mismatches and each cluster's share per second.
    Migration(migration::MigrationArgs),
    /// Admission control (issue 29): a hot-key storm against a rate-limited pool (what its
    /// servers see against the rate, the other pool's p99 with and without the storm), and a
    /// router stalled 2 s in front of a pool with one hung server of four (servers marked
    /// down against `max_down_fraction`).
    Admission(admission::AdmissionArgs),
    /// The flash tier (issue 30) against memcached 1.6.45's extstore and fio on this
    /// machine's disk: RAM per flash item, write amplification, flash hits per second and
    /// their latency, whether the page cache served them.
    Flash(flash::FlashArgs),
}

/// Runs `experiment`; fails (after printing everything) on a wrong reply or a failed run.
pub fn run(experiment: &Experiment) -> Result<()> {
    match experiment {
        Experiment::Load(args) => super::run(args),
        Experiment::Herd(args) => herd::bench(args),
        Experiment::Udp(args) => udp::bench(args),
        Experiment::Restart(args) => restart::bench(args),
        Experiment::Gutter(args) => gutter::bench(args),
        Experiment::Client(args) => client_bench::bench(args),
        Experiment::Invalidation(args) => invalidation::bench(args),
        Experiment::Replay(args) => replay::bench(args),
        Experiment::Warmup(args) => warmup::bench(args),
        Experiment::Expiry(args) => expiry::bench(args),
        Experiment::Discovery(args) => discovery::bench(args),
        Experiment::Regions(args) => regions::bench(args),
        Experiment::Scale(args) => scale::bench(args),
        Experiment::Migration(args) => migration::bench(args),
        Experiment::Admission(args) => admission::bench(args),
        Experiment::Flash(args) => flash::bench(args),
    }
}

/// `err` with a tip naming the experiments that take the flag it refused, when another
/// experiment takes it (`memfleet bench load --invalidate 1s`: herd's).
pub fn explain(mut err: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    use clap::Subcommand;
    if err.kind() != ErrorKind::UnknownArgument {
        return err;
    }
    let Some(ContextValue::String(arg)) = err.get(ContextKind::InvalidArg) else {
        return err;
    };
    let Some(long) = arg.strip_prefix("--") else {
        return err;
    };
    let long = long.split('=').next().unwrap_or(long).to_string();
    let bench = Experiment::augment_subcommands(clap::Command::new("bench"));
    let takes = |c: &clap::Command| {
        c.get_arguments().any(|a| {
            a.get_long() == Some(long.as_str())
                || a.get_all_aliases()
                    .is_some_and(|al| al.contains(&long.as_str()))
        })
    };
    let owners: Vec<&str> = bench
        .get_subcommands()
        .filter(|c| takes(c))
        .map(|c| c.get_name())
        .collect();
    if owners.is_empty() {
        return err;
    }
    let mut tips = match err.get(ContextKind::Suggested) {
        Some(ContextValue::StyledStrs(tips)) => tips.clone(),
        _ => Vec::new(),
    };
    tips.push(
        format!(
            "--{long} is a flag of `memfleet bench {}`",
            owners.join("|")
        )
        .into(),
    );
    err.insert(ContextKind::Suggested, ContextValue::StyledStrs(tips));
    err
}

/// `memfleet`'s command line (`argv[0]` included) with `bench`'s older forms rewritten to
/// `memfleet bench <experiment> ...`: `--scenario X` (or `--scenario=X`) anywhere before a
/// `--` becomes the subcommand X, and a first argument that is a flag other than `-h` or
/// `--help` gets `load` put before it. Any other command line is returned as it is.
pub fn subcommand_argv(argv: Vec<OsString>) -> Vec<OsString> {
    if argv.len() < 3 || argv[1] != "bench" {
        return argv;
    }
    let mut rest = argv[2..].to_vec();
    let end = rest.iter().position(|a| a == "--").unwrap_or(rest.len());
    let mut experiment = None;
    for i in 0..end {
        let Some(arg) = rest[i].to_str() else {
            continue;
        };
        if arg == "--scenario" && i + 1 < end {
            experiment = Some(rest.remove(i + 1));
            rest.remove(i);
            break;
        }
        if let Some(name) = arg.strip_prefix("--scenario=") {
            experiment = Some(name.into());
            rest.remove(i);
            break;
        }
    }
    let first_is_flag = rest
        .first()
        .and_then(|a| a.to_str())
        .is_some_and(|a| a.starts_with('-') && a != "-h" && a != "--help");
    if experiment.is_none() && first_is_flag {
        experiment = Some("load".into());
    }
    let mut out = argv[..2].to_vec();
    out.extend(experiment);
    out.extend(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(line: &str) -> String {
        let argv = line.split(' ').map(OsString::from).collect();
        let out: Vec<String> = subcommand_argv(argv)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        out.join(" ")
    }

    #[test]
    fn scenario_flags_become_the_subcommand() {
        assert_eq!(
            rewrite("memfleet bench --scenario herd --spawn memfleet"),
            "memfleet bench herd --spawn memfleet"
        );
        assert_eq!(
            rewrite("memfleet bench --spawn memfleet --scenario=udp -c 1"),
            "memfleet bench udp --spawn memfleet -c 1"
        );
        assert_eq!(
            rewrite("memfleet bench --scenario load --repeat 3"),
            "memfleet bench load --repeat 3"
        );
    }

    #[test]
    fn flags_without_an_experiment_are_load() {
        assert_eq!(
            rewrite("memfleet bench --spawn memcached -c 8"),
            "memfleet bench load --spawn memcached -c 8"
        );
        assert_eq!(rewrite("memfleet bench -c 8"), "memfleet bench load -c 8");
    }

    #[test]
    fn other_command_lines_are_left_alone() {
        for line in [
            "memfleet bench herd --invalidate 100ms",
            "memfleet bench --help",
            "memfleet bench -h",
            "memfleet bench",
            "memfleet sim --scenario x",
            "memfleet bench load -- --scenario herd",
        ] {
            assert_eq!(rewrite(line), line);
        }
    }
}

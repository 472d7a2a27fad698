//! `memfleet`: one command for every part of the system.
//!
//! Thin by design: each subcommand parses its flags and hands over to a library crate.
//!
//! The product (server, router, invalidator) is always built; the lab (bench, sim, floor,
//! fleet) only with the `lab` feature, on by default and left out of the package and image.

use clap::{Parser, Subcommand};

#[cfg(feature = "lab")]
mod fleet;

/// memfleet: a memcache system (Segcache server, router, invalidator, bench).
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of its largest variant is no cost.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Serve memcached's text, meta and binary protocols from a Segcache engine (by default
    /// on 127.0.0.1:11211 with 64 MiB, like memcached).
    Server(memfleet_server::ServerArgs),
    /// Route memcached clients to pools of servers with libmemcached-, twemproxy-,
    /// spymemcached- or pymemcache-compatible placement (from memfleet's TOML, or a
    /// twemproxy YAML file read as twemproxy reads it).
    Router(memfleet_router::RouterArgs),
    #[cfg(feature = "lab")]
    /// Replay a trace or a synthetic workload through the Segcache engine and an exact LRU
    /// (memcached-like 56-byte item overhead) in-process, and print miss ratio vs memory.
    Sim(memfleet_sim::SimArgs),
    #[cfg(feature = "lab")]
    /// Run an experiment on memcached-protocol servers, each with its own flags: load (the
    /// default: `memfleet bench --spawn ...` is `memfleet bench load --spawn ...`), herd, udp,
    /// restart, gutter, client, invalidation, replay, warmup, expiry, discovery.
    #[command(subcommand)]
    Bench(memfleet_bench::load::Experiment),
    #[cfg(feature = "lab")]
    /// The floor server (answers `memfleet bench`'s requests with no cache: the socket I/O
    /// floor) or, with --backend, the floor proxy: yardsticks for the bench.
    Floor(memfleet_floor::FloorArgs),
    /// Tail PostgreSQL's logical replication stream and delete the keys committed
    /// transactions invalidate in every cache cluster (the paper's mcsqueal).
    Invalidator(memfleet_invalidator::InvalidatorArgs),
    #[cfg(feature = "lab")]
    /// Start (`up`) or stop (`down`) a complete small deployment on loopback: two frontend
    /// clusters with a router each, a gutter pool and a regional pool.
    #[command(subcommand)]
    Fleet(fleet::FleetCommand),
}

fn main() -> anyhow::Result<()> {
    // `memfleet bench --scenario X ...` and `memfleet bench --flag ...` are older spellings
    // of `memfleet bench X ...` and `memfleet bench load --flag ...`.
    let cli = parse(std::env::args_os().collect());
    // One log setup for every subcommand: `MEMFLEET_LOG` (tracing's filter syntax, default
    // `info`) to stderr, colored only on a terminal.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MEMFLEET_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    match cli.command {
        Command::Server(args) => memfleet_server::run(&args),
        Command::Router(args) => memfleet_router::run(&args),
        #[cfg(feature = "lab")]
        Command::Sim(args) => {
            let segcache = memfleet_sim::segcache::factory(args.engine.clone());
            memfleet_sim::run(&args, &segcache)
        }
        #[cfg(feature = "lab")]
        Command::Bench(experiment) => memfleet_bench::load::cli::run(&experiment),
        #[cfg(feature = "lab")]
        Command::Floor(args) => memfleet_floor::run(&args),
        #[cfg(feature = "lab")]
        Command::Fleet(command) => fleet::run(&command),
        Command::Invalidator(args) => memfleet_invalidator::run_cli(&args),
    }
}

/// The command line, with the bench's older spellings: `memfleet bench --scenario X ...` and
/// `memfleet bench --flag ...` are `memfleet bench X ...` and `memfleet bench load --flag ...`.
#[cfg(feature = "lab")]
fn parse(argv: Vec<std::ffi::OsString>) -> Cli {
    let argv = memfleet_bench::load::cli::subcommand_argv(argv);
    let bench = argv.get(1).is_some_and(|a| a == "bench");
    Cli::try_parse_from(argv).unwrap_or_else(|e| match bench {
        // A flag of another experiment: say whose.
        true => memfleet_bench::load::cli::explain(e).exit(),
        false => e.exit(),
    })
}

/// The command line of the product build: a lab command is named as such, with how to get
/// it, rather than clap's "unrecognized subcommand".
#[cfg(not(feature = "lab"))]
fn parse(argv: Vec<std::ffi::OsString>) -> Cli {
    const LAB: [&str; 4] = ["bench", "sim", "floor", "fleet"];
    if let Some(lab) = argv
        .get(1)
        .and_then(|a| a.to_str())
        .filter(|a| LAB.contains(a))
    {
        eprintln!(
            "error: `memfleet {lab}` is part of memfleet's lab, which this build leaves out \
             (the package and the image carry the server, the router and the invalidator); \
             build it from a checkout with `cargo build --release` (feature `lab`, on by default)"
        );
        std::process::exit(2);
    }
    Cli::parse_from(argv)
}

//! `memfleet`: one command for every part of the system.
//!
//! Thin by design: each subcommand parses its flags and hands over to a library crate.

use clap::{Parser, Subcommand};

mod fleet;

/// memfleet: a memcache system (Segcache server, router, invalidator, bench).
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of its largest variant (bench's many flags) is no cost.
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
    /// Replay a trace or a synthetic workload through the Segcache engine and an exact LRU
    /// (memcached-like 56-byte item overhead) in-process, and print miss ratio vs memory.
    Sim(memfleet_sim::SimArgs),
    /// Load memcached-protocol servers side by side (spawned with --spawn or given with
    /// --target) and print ops/s, latency percentiles and server CPU time per operation.
    // Boxed: the load generator's flags make its variant several times the size of the others.
    Bench(Box<memfleet_bench::load::LoadArgs>),
    /// The floor server (answers `memfleet bench`'s requests with no cache: the socket I/O
    /// floor) or, with --backend, the floor proxy: yardsticks for the bench.
    Floor(memfleet_floor::FloorArgs),
    /// Tail PostgreSQL's logical replication stream and delete the keys committed
    /// transactions invalidate in every cache cluster (the paper's mcsqueal).
    Invalidator(memfleet_invalidator::InvalidatorArgs),
    /// Start (`up`) or stop (`down`) a complete small deployment on loopback: two frontend
    /// clusters with a router each, a gutter pool and a regional pool.
    #[command(subcommand)]
    Fleet(fleet::FleetCommand),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
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
        Command::Sim(args) => {
            let segcache = memfleet_sim::segcache::factory(args.engine.clone());
            memfleet_sim::run(&args, &segcache)
        }
        Command::Bench(args) => memfleet_bench::load::run(&args),
        Command::Floor(args) => memfleet_floor::run(&args),
        Command::Fleet(command) => fleet::run(&command),
        Command::Invalidator(args) => memfleet_invalidator::run_cli(&args),
    }
}

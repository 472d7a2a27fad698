//! memfleet's integration tests: the `memfleet` binary and its crates driven through real
//! sockets, processes, databases and engines. One test binary (linked once) with a module
//! per subject; `scripts/test-binaries` runs each module in a process of its own, as its
//! own binary once was (`cargo test --test it faults::` runs one module).
//!
//! What the modules share: `support` (the binary's path, servers on free ports, text
//! connections, certificates), `faults`'s machines in network namespaces (`faults::netns`),
//! routers and traffic (`faults::fleet`, `faults::traffic`).

mod support;

mod architecture;
mod auth;
mod auto_eject;
mod bench_admission;
mod bench_cli;
mod bench_experiments;
mod bench_load;
mod bench_replay;
mod bench_scale;
mod differential;
mod dns_hosts;
mod faults;
mod flash_faults;
mod fleet;
mod floor_cli;
mod hostile;
mod invalidator_cli;
mod kube_play;
mod lost_deletes;
mod memcached_exporter;
mod memory_bound;
mod packages;
mod reply_framing;
mod router_auth;
mod router_bigvalue;
mod router_binary;
mod router_cli;
mod router_failover_routes;
mod router_observability;
mod router_operator;
mod router_outstanding;
mod router_rates;
mod router_shadow;
mod router_tls;
mod router_workers;
mod server_cli;
mod soak;
mod standby_invalidator;
mod systemd_notify;
mod tls;
mod twemproxy_hashing;
mod warm_meta;

//! memfleet's test kit: what the root `tests/`, the crates' tests and `memfleet bench`'s
//! experiments share to start things for real and find them again. Dev-only for the product
//! crates (server, storage, protocol, routing, client, router, invalidator depend on it only
//! as a dev-dependency); the bench links it because its experiments start real servers.
//!
//! | module | what it holds |
//! |--------|---------------|
//! | `dns` | [`DnsServer`]: an authoritative DNS server in-process, its zone changed while it runs |
//! | `ports` | a free port on 127.0.0.1; connecting while a listener comes up |
//! | `process` | child processes stopped when dropped: [`Killed`] (tests), [`Spawned`] (waited for until it accepts), `memfleet server` and memcached on free ports |
//! | `server_spec` | [`ServerSpec`]: a server to start (memfleet or memcached, memory, threads, flags, CPU), its command line written once |
//! | `router` | a `memfleet router` on a configuration file of its own ([`Router`]) |
//! | `router_config` | [`RouterConfig`]: a router's TOML, pool by pool and route by route |
//! | `text_conn` | [`TextConn`]: a blocking text-protocol connection (a line, a get, `stats`) |
//! | `postgres` | [`Postgres`]: a throwaway PostgreSQL (initdb in a temp dir) |
//!
//! Not here: the load (`memfleet-bench`), the assertions (each test's own).

pub mod dns;
pub mod ports;
pub mod postgres;
pub mod process;
pub mod router;
pub mod router_config;
pub mod server_spec;
pub mod text_conn;

pub use dns::DnsServer;
pub use ports::{connect, free_port, free_ports_at, try_free_port, try_free_ports_at};
pub use postgres::{Detached, Postgres};
pub use process::{memcached, memfleet_server, Killed, Spawned};
pub use router::Router;
pub use router_config::RouterConfig;
pub use server_spec::ServerSpec;
pub use text_conn::TextConn;

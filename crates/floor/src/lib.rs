//! `memfleet floor`: yardsticks, not products. The floor server answers exactly the
//! requests `memfleet bench` sends by computing each reply (no cache, no storage): its CPU
//! time per request is the socket I/O floor any memcached-protocol server can reach on the
//! machine. The floor proxy forwards to one backend with nothing but the socket I/O: the
//! floor any proxy can reach. `memfleet bench --spawn floor` starts the server;
//! `scripts/bench-router` starts the proxy.
//!
//! | module | what it holds |
//! |--------|---------------|
//! | `server` | the floor server (`--value-size`: the values the bench's sets store) |
//! | `proxy` | the floor proxy (`--backend`) |
//! | `epoll` | the epoll instance and `TCP_NODELAY` both use |

mod epoll;
pub mod proxy;
pub mod server;

use anyhow::Context;

/// `memfleet floor` flags.
#[derive(clap::Args, Clone, Debug)]
pub struct FloorArgs {
    /// Listen on 127.0.0.1:PORT.
    #[arg(long, short = 'p', value_name = "PORT")]
    pub port: u16,
    /// The server: the value size of the run it answers (`memfleet bench --value-size`,
    /// a fixed size).
    #[arg(long, default_value_t = 100, conflicts_with = "backend")]
    pub value_size: usize,
    /// Be the proxy instead, forwarding to this one server.
    #[arg(long, value_name = "HOST:PORT")]
    pub backend: Option<std::net::SocketAddr>,
}

/// `memfleet floor`: serves until killed.
pub fn run(args: &FloorArgs) -> anyhow::Result<()> {
    let port = args.port;
    match args.backend {
        Some(backend) => proxy::serve(port, backend)
            .with_context(|| format!("floor proxy on 127.0.0.1:{port} to {backend}")),
        None => server::serve(port, args.value_size)
            .with_context(|| format!("floor server on 127.0.0.1:{port}")),
    }
}

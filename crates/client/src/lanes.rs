//! Where a server connection's task runs: on the runtime of the router worker whose clients
//! use it, so that a request and its reply never cross threads.
//!
//! A multi-threaded router runs one current-thread runtime per worker (`memfleet router -t
//! k`, `crates/router/src/workers.rs`). Each server gets `server_connections` connections
//! per worker (`RouterConfig::workers`); connection `c` belongs to worker `c % k`, and a
//! client served by worker `i` sends on lanes `≡ i (mod k)`, so its requests go out on a
//! connection whose task runs on its own thread. Which runtimes those are is set once on
//! the thread that builds the router's topologies ([`place_lanes_on`]); elsewhere (the
//! client library, one-worker routers) a connection's task is spawned where it is made.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;
use tokio::runtime::Handle;

thread_local! {
    /// The workers' runtimes, by worker number, for backends made on this thread.
    static LANE_RUNTIMES: RefCell<Option<Arc<[Handle]>>> = const { RefCell::new(None) };
}

/// Backends made on this thread from now on run connection `c`'s task on `runtimes[c %
/// runtimes.len()]` (the router calls it on the thread that builds its topologies).
pub fn place_lanes_on(runtimes: Arc<[Handle]>) {
    LANE_RUNTIMES.with(|r| *r.borrow_mut() = Some(runtimes));
}

/// Spawns connection `lane`'s task: on its worker's runtime when [`place_lanes_on`] named
/// them for this thread, else on the current runtime.
pub(crate) fn spawn<F>(lane: usize, task: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let runtime = LANE_RUNTIMES.with(|r| {
        r.borrow()
            .as_ref()
            .map(|runtimes| runtimes[lane % runtimes.len()].clone())
    });
    match runtime {
        Some(handle) => drop(handle.spawn(task)),
        None => drop(tokio::spawn(task)),
    }
}

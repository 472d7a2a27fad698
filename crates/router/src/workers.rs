//! A router's workers: one current-thread runtime per worker thread, as the server runs
//! (`memfleet router -t k`). Worker 0 is the runtime the router was started on, which also
//! runs the listeners' accept loops, reloads, DNS rounds and the admin port; workers 1..k
//! run on threads of their own. Each accepted client is handed to one worker (round robin
//! over all of them, or over its listener's `workers`) and served there to the end, and its
//! requests go out on server connections whose tasks run on the same worker
//! (`memfleet_client::lanes`): no request or reply crosses threads. One work-stealing
//! runtime for all workers, which this replaces, moved every request between a client's
//! task and its server connection's task on another thread, and CPU per request doubled
//! from one worker to two (`memfleet bench scale`, docs/BENCHMARKS.md).

use std::sync::Arc;
use std::thread::JoinHandle;
use tokio::runtime::Handle;

/// The worker runtimes; dropping it stops workers 1..k (their clients are dropped with them).
pub struct Workers {
    handles: Arc<[Handle]>,
    stops: Vec<tokio::sync::oneshot::Sender<()>>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// `count` workers (at least one): the current runtime and `count - 1` new threads.
    /// Server connections made on this thread from now on are placed on them.
    pub fn start(count: usize) -> std::io::Result<Workers> {
        let mut handles = vec![Handle::current()];
        let mut stops = Vec::new();
        let mut threads = Vec::new();
        for i in 1..count.max(1) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            handles.push(rt.handle().clone());
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            stops.push(stop);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("memfleet-router-{i}"))
                    .spawn(move || {
                        rt.block_on(async {
                            let _ = stopped.await;
                        })
                    })?,
            );
        }
        let handles: Arc<[Handle]> = handles.into();
        memfleet_client::lanes::place_lanes_on(handles.clone());
        Ok(Workers {
            handles,
            stops,
            threads,
        })
    }

    /// How many workers there are.
    pub fn count(&self) -> usize {
        self.handles.len()
    }

    /// Worker `worker`'s runtime (taken modulo the count).
    pub fn runtime(&self, worker: usize) -> &Handle {
        &self.handles[worker % self.handles.len()]
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for stop in self.stops.drain(..) {
            let _ = stop.send(());
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

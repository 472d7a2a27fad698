//! [`RunningRouter`]: a router on a runtime and thread of its own, for tests and embedding;
//! and the runtime `memfleet router` itself runs on.

use crate::listeners::bind;
use memfleet_routing::RouterConfig;
use std::net::SocketAddr;
use std::time::Duration;

/// A router running on its own runtime (tests, embedding); stops when dropped.
pub struct RunningRouter {
    /// Each TCP listener's address, in configuration order (Unix sockets are where the
    /// configuration says).
    pub addrs: Vec<SocketAddr>,
    /// The admin port's address, if any.
    pub admin_addr: Option<SocketAddr>,
    reloads: tokio::sync::mpsc::UnboundedSender<RouterConfig>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RunningRouter {
    /// Starts `pools` on a new runtime of `threads` workers (and an admin port at `admin`);
    /// returns once they listen.
    pub fn start(
        config: impl Into<RouterConfig>,
        threads: usize,
        admin: Option<String>,
    ) -> anyhow::Result<RunningRouter> {
        let config = config.into();
        let rt = runtime()?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (reload_tx, reload_rx) = tokio::sync::mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("memfleet-router".into())
            .spawn(move || {
                rt.block_on(async move {
                    match bind(config, admin.as_deref(), threads).await {
                        Ok(bound) => {
                            let _ = ready_tx.send(Ok((bound.addrs.clone(), bound.admin_addr)));
                            bound
                                .run(
                                    async move {
                                        let _ = stop_rx.await;
                                    },
                                    reload_rx,
                                )
                                .await;
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                        }
                    }
                });
                // Connection tasks still parked are dropped with the runtime.
                rt.shutdown_timeout(Duration::from_secs(1));
            })?;
        match ready_rx.recv() {
            Ok(Ok((addrs, admin_addr))) => Ok(RunningRouter {
                addrs,
                admin_addr,
                reloads: reload_tx,
                stop: Some(stop_tx),
                thread: Some(thread),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => anyhow::bail!("the router thread ended at start"),
        }
    }
}

impl RunningRouter {
    /// Applies a new configuration (asynchronously, as a SIGHUP would).
    pub fn reload(&self, config: impl Into<RouterConfig>) {
        let _ = self.reloads.send(config.into());
    }
}

impl Drop for RunningRouter {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The runtime the router starts on: a current-thread runtime, its worker 0; [`bind`]
/// starts the others (`workers.rs`).
///
/// [`bind`]: crate::bind
pub(crate) fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

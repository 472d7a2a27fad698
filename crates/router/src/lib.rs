//! `memfleet router`: a memcached-protocol proxy (mcrouter's and twemproxy's job).
//!
//! Clients connect to a listener and speak the text and meta protocols as to one
//! memcached; the router sends each key where its pool's distribution or its route says
//! (`memfleet_client`: the same pools, routes, connections and spool an application
//! embedding the client library uses), and answers in order (`proxy`).
//!
//! | module | what it holds |
//! |--------|---------------|
//! | `args` | [`RouterArgs`], the `memfleet router` flags |
//! | `listeners` | binding listeners ([`bind`], [`BoundRouter`]), accepting clients, handing each to a worker, applying a reload ([`ServingListeners`]) |
//! | `workers` | [`Workers`]: one current-thread runtime per worker thread, each serving its clients on its own server connections |
//! | `proxy` | a client connection: parse, route, split multi-gets, reassemble, reply in order |
//! | `reloadable` | what a reload swaps: each listener's route, the topology, the auth file |
//! | `watch` | reading the configuration and auth files; reloading on SIGHUP and on change |
//! | `running` | [`RunningRouter`]: a router on its own runtime (tests, embedding) |
//! | `admin` | `/metrics` on the admin address |
//! | `validate` | `--validate-config FILE`, `-t`: the configuration checked, nothing bound |
//! | (this file) | the `memfleet router` command; `systemd`: its readiness and reload notifications |

mod admin;
mod args;
mod detailed;
mod listeners;
mod proxy;
mod reloadable;
mod request_log;
mod route_latency;
mod running;
mod validate;
mod watch;
mod workers;

pub use args::{RouterArgs, Threads};
pub use listeners::{bind, BoundRouter, Listener, ServingListeners};
pub use reloadable::{ClientAuth, ServedTopology};
pub use running::RunningRouter;
pub use watch::{load_auth, load_config};
pub use workers::Workers;

use anyhow::Context;
use memfleet_tls::ServerTls;
use running::runtime;
use sd_notify::NotifyState;
use std::sync::Arc;
use watch::watch_config;

/// `memfleet router`: serves until SIGINT or SIGTERM.
pub fn run(args: &RouterArgs) -> anyhow::Result<()> {
    if args.checks_only() {
        return validate::run(args);
    }
    proxy::note_start();
    let config = load_config(args)?;
    let tls = args
        .tls_files()?
        .map(ServerTls::load)
        .transpose()
        .context("TLS")?
        .map(Arc::new);
    let auth = ClientAuth::default();
    if let Some(file) = &args.auth_file {
        auth.store(Some(Arc::new(load_auth(file).context("--auth-file")?)));
    }
    if let Some(rate) = args.log_requests {
        request_log::start(rate, args.log_keys, args.request_log.as_deref())?;
    }
    let threads = args
        .thread_count()
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let rt = runtime()?;
    rt.block_on(async {
        // Every handler is in place before the ports open: a signal sent as soon as the
        // router answers must not meet the default action (which ends the process).
        use tokio::signal::unix::{signal, SignalKind};
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let hup = signal(SignalKind::hangup())?;
        let stop = async move {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            systemd::notify(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
        };
        let (reload_tx, reload_rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(watch_config(
            args.clone(),
            hup,
            reload_tx,
            tls.clone(),
            auth.clone(),
        ));
        let bound = bind(config, args.admin_listen.as_deref(), threads)
            .await?
            .with_auth(auth);
        let bound = match tls {
            Some(tls) => bound.with_tls(tls),
            None => bound,
        };
        // Every listener and the admin port are bound: clients' connections queue from now.
        let mut status = format!("routing on {} listener(s)", bound.addrs.len());
        if let Some(admin) = bound.admin_addr {
            status += &format!(", /metrics on {admin}");
        }
        systemd::notify(&[NotifyState::Ready, NotifyState::Status(&status)]);
        bound.run(stop, reload_rx).await;
        anyhow::Ok(())
    })
}

/// systemd's notifications (`sd_notify(3)`; nothing is sent without `NOTIFY_SOCKET`):
/// `READY=1` once listening, `STOPPING=1` on SIGINT/SIGTERM, and the reload protocol of
/// `Type=notify-reload` around a SIGHUP: `RELOADING=1` with `MONOTONIC_USEC=` when the
/// signal arrives, `READY=1` once the configuration it read is applied (or refused: the old
/// one serves on, ready). A reload because the file changed is not announced: nothing waits
/// for it.
pub(crate) mod systemd {
    use sd_notify::NotifyState;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Configurations the serving loop has taken from the reload channel (applied or
    /// refused), in the order the watcher sent them.
    static APPLIED: AtomicU64 = AtomicU64::new(0);
    /// The count of [`APPLIED`] at which the latest SIGHUP's configuration is done; 0:
    /// none is awaited.
    static READY_AT: AtomicU64 = AtomicU64::new(0);

    /// Sends `states`; a failure is logged, never fatal.
    pub(crate) fn notify(states: &[NotifyState]) {
        if let Err(e) = sd_notify::notify(states) {
            tracing::warn!(error = %e, "cannot notify the service manager (NOTIFY_SOCKET)");
        }
    }

    /// A SIGHUP arrived: the reload starts.
    pub(crate) fn reloading() {
        match NotifyState::monotonic_usec_now() {
            Ok(now) => notify(&[
                NotifyState::Reloading,
                now,
                NotifyState::Status("reloading (SIGHUP)"),
            ]),
            Err(e) => tracing::warn!(error = %e, "cannot read CLOCK_MONOTONIC"),
        }
    }

    /// The SIGHUP's reload ended before reaching the listeners (the file was refused).
    pub(crate) fn reload_refused(why: &str) {
        let status = format!("serving the previous configuration: {why}");
        notify(&[NotifyState::Ready, NotifyState::Status(&status)]);
    }

    /// The SIGHUP's configuration is the `sent`-th the watcher sends (call before sending
    /// it): `READY=1` goes once the serving loop has taken that many.
    pub(crate) fn ready_after(sent: u64) {
        READY_AT.store(sent, Ordering::SeqCst);
    }

    /// The serving loop took one configuration from the channel and applied (or refused) it.
    pub(crate) fn applied() {
        let n = APPLIED.fetch_add(1, Ordering::SeqCst) + 1;
        if READY_AT
            .compare_exchange(n, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            notify(&[NotifyState::Ready, NotifyState::Status("reloaded")]);
        }
    }
}

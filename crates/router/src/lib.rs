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
//! | `listeners` | binding listeners ([`bind`], [`BoundRouter`]), accepting clients, applying a reload ([`ServingListeners`]) |
//! | `proxy` | a client connection: parse, route, split multi-gets, reassemble, reply in order |
//! | `reloadable` | what a reload swaps: each listener's route, the topology, the auth file |
//! | `watch` | reading the configuration and auth files; reloading on SIGHUP and on change |
//! | `running` | [`RunningRouter`]: a router on its own runtime (tests, embedding) |
//! | `admin` | `/metrics` on the admin address |
//! | (this file) | the `memfleet router` command |

mod admin;
mod args;
mod listeners;
mod proxy;
mod reloadable;
mod running;
mod watch;

pub use args::RouterArgs;
pub use listeners::{bind, BoundRouter, Listener, ServingListeners};
pub use reloadable::{ClientAuth, ServedTopology};
pub use running::RunningRouter;
pub use watch::{load_auth, load_config};

use anyhow::Context;
use memfleet_tls::ServerTls;
use running::runtime;
use std::sync::Arc;
use watch::watch_config;

/// `memfleet router`: serves until SIGINT or SIGTERM.
pub fn run(args: &RouterArgs) -> anyhow::Result<()> {
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
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let rt = runtime(threads)?;
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
        };
        let (reload_tx, reload_rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(watch_config(
            args.clone(),
            hup,
            reload_tx,
            tls.clone(),
            auth.clone(),
        ));
        let bound = bind(config, args.admin_listen.as_deref())
            .await?
            .with_auth(auth);
        let bound = match tls {
            Some(tls) => bound.with_tls(tls),
            None => bound,
        };
        bound.run(stop, reload_rx).await;
        anyhow::Ok(())
    })
}

//! memfleet's memcached-compatible server: the Segcache engine (`memfleet-storage`) behind
//! memcached's text and meta protocols (`memfleet-protocol`), served by one single-threaded
//! tokio runtime per worker thread.
//!
//! # Map
//!
//! | module        | what it does |
//! |---------------|--------------|
//! | `config`      | flags, environment, TOML file → validated [`Settings`] |
//! | `state`       | what every worker shares (`ServerState`) and one worker's (`WorkerContext`) |
//! | `worker`      | worker threads: SO_REUSEPORT listener, accept loop, connection limit |
//! | `udp`         | each worker's UDP socket |
//! | `connection`  | one connection: read, run a batch of requests, one write; bounded buffers |
//! | `transport`   | what a connection reads and writes: plain TCP, or a TLS session over it |
//! | `execute`     | a parsed request against the engine → memcached's reply bytes, by family |
//! | `limits`, `version` | the connection loop's sizes; the version string |
//! | `stats`       | per-worker counters (single writer, summed on demand) |
//! | `admin_stats` | `stats`, `stats settings/items/slabs`, Prometheus text |
//! | `dump`        | key dumps: `stats cachedump`, `lru_crawler metadump/mgdump`, streamed |
//! | `admin`       | the optional `/metrics` HTTP port |
//! | `debug_clock` | `debugtime` (tests only, `--debug-time`): a clock that can be moved |
//!
//! # Use
//!
//! ```no_run
//! use memfleet_server::{Server, Settings};
//! let mut settings = Settings::default();
//! settings.listen.port = 0;
//! settings.limits.threads = 2;
//! let server = Server::start(settings)?;
//! println!("serving on {}", server.local_addr());
//! server.shutdown()?;
//! # anyhow::Ok(())
//! ```

mod admin;
mod admin_stats;
pub mod auth;
pub mod cluster_config;
pub mod config;
pub(crate) mod conn_stats;
pub mod connection;
mod debug_clock;
pub mod dump;
pub mod execute;
mod file_stamp;
pub mod flash;
mod limits;
pub mod sasl;
pub mod state;
pub mod stats;
mod transport;
pub mod udp;
mod version;
pub mod warm;
pub mod worker;

pub use config::{Leases, Limits, Listen, ServerArgs, Settings};

use anyhow::Context;
use memfleet_protocol::ParserConfig;
use memfleet_storage::{Cache, Config, Expirer};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::watch;

/// How often proactive expiration runs: expired items stop holding memory within about this
/// long (Segcache §3.5).
pub(crate) const EXPIRE_INTERVAL: Duration = Duration::from_millis(500);

/// How long connections get to finish their current batch at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// A running server.
pub struct Server {
    addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    shutdown: watch::Sender<bool>,
    threads: Vec<JoinHandle<std::io::Result<()>>>,
    server: Arc<state::ServerState>,
    expirer: Option<Expirer>,
    memory_file: Option<warm::MemoryFile>,
    start: warm::Start,
}

impl Server {
    /// Allocates the cache, binds the listeners and starts the workers. With port 0 the
    /// kernel picks a port (see [`Server::local_addr`]).
    pub fn start(mut settings: Settings) -> anyhow::Result<Server> {
        let wanted = SocketAddr::new(settings.listen.address, settings.listen.port);
        // SO_REUSEPORT would let this server share a port another process (of the same
        // user) already listens on, splitting the clients between the two without a word:
        // claim the port alone first, so a taken port is an error as in memcached.
        let probe =
            worker::bind_exclusive(wanted).with_context(|| format!("cannot listen on {wanted}"))?;
        let wanted = probe.local_addr()?;
        drop(probe);
        let first = worker::bind(wanted, settings.listen.backlog)
            .with_context(|| format!("cannot listen on {wanted}"))?;
        let addr = first.local_addr()?;
        let mut listeners = vec![first];
        for _ in 1..settings.limits.threads {
            listeners.push(worker::bind(addr, settings.listen.backlog)?);
        }
        let mut udp_sockets: Vec<Option<std::net::UdpSocket>> =
            (0..settings.limits.threads).map(|_| None).collect();
        if let Some(port) = settings.listen.udp_port {
            let wanted = SocketAddr::new(settings.listen.address, port);
            // As for TCP: claim the port alone first, so a taken port is an error.
            let probe = std::net::UdpSocket::bind(wanted)
                .with_context(|| format!("cannot listen on UDP {wanted}"))?;
            let wanted = probe.local_addr()?;
            drop(probe);
            for slot in &mut udp_sockets {
                *slot = Some(
                    udp::bind(wanted).with_context(|| format!("cannot listen on UDP {wanted}"))?,
                );
            }
            settings.listen.udp_port = Some(wanted.port());
            tracing::warn!(
                udp = %wanted,
                "UDP is on: serve it only where source addresses cannot be spoofed"
            );
        }
        let admin = match settings.listen.admin_port {
            Some(port) => {
                let l = std::net::TcpListener::bind(SocketAddr::new(settings.listen.address, port))
                    .with_context(|| format!("cannot listen on admin port {port}"))?;
                l.set_nonblocking(true)?;
                Some(l)
            }
            None => None,
        };
        let admin_addr = admin.as_ref().map(|l| l.local_addr()).transpose()?;
        let auth = settings
            .listen
            .auth_file
            .as_deref()
            .map(auth::load)
            .transpose()?;
        let cluster_config = settings
            .listen
            .cluster_config
            .as_deref()
            .map(cluster_config::ClusterConfig::load)
            .transpose()?;
        let sasl = settings
            .listen
            .sasl_pwdb
            .as_deref()
            .map(sasl::SaslDb::load)
            .transpose()?;
        if settings.listen.udp_port.is_some() && auth.is_some() {
            anyhow::bail!(
                "authentication and UDP cannot be combined: a datagram cannot authenticate"
            );
        }
        let tls = settings
            .listen
            .tls
            .clone()
            .map(memfleet_tls::ServerTls::load)
            .transpose()
            .context("TLS")?
            .map(Arc::new);
        if tls.is_some() && settings.listen.udp_port.is_some() {
            tracing::warn!("TLS covers TCP only: UDP requests and replies are not encrypted");
        }
        // The cache comes last: opening a memory file consumes its snapshot, so a start that
        // fails on a taken port must fail before that.
        let debug_clock = settings.debug_time.then(debug_clock::DebugClock::new);
        let mut config = Config::new(settings.limits.memory_bytes)
            .segment_size(settings.segment_size())
            .lease_interval(settings.leases.interval)
            .stale_after_delete(settings.leases.stale_after_delete)
            .cas_start(settings.cas_start);
        let flash_files = open_flash(&settings)?;
        if let Some(files) = &flash_files {
            let mut flash =
                memfleet_storage::FlashConfig::new(Arc::new(flash::FlashDevice(files.clone())));
            flash.write_budget = settings.flash.write_budget;
            flash.item_size_hint = settings.flash.item_size;
            config = config.flash(flash);
        }
        if let Some(debug) = &debug_clock {
            tracing::warn!("--debug-time: any client can move the clock with `debugtime`");
            config = config.clock(debug.clock());
            debug.spawn()?;
        }
        let (cache, memory_file, start) = match &settings.memory_file {
            Some(path) => {
                let (cache, file, start) = warm::open(path, config)?;
                (cache, Some(file), start)
            }
            None => (
                Cache::new(config).context("the memory limit cannot hold the cache")?,
                None,
                warm::Start::Plain,
            ),
        };
        match &start {
            warm::Start::Plain => {}
            warm::Start::Cold(why) => tracing::warn!(reason = %why, "memory file: starting empty"),
            warm::Start::Warm { items, micros } => tracing::info!(
                items,
                restore_ms = *micros as f64 / 1000.0,
                "memory file: warm restart"
            ),
        }
        let (tx, rx) = watch::channel(false);
        let counters: Vec<_> = (0..settings.limits.threads)
            .map(|_| Arc::default())
            .collect();
        let expirer = cache.spawn_expirer(EXPIRE_INTERVAL);
        let server = Arc::new(state::ServerState {
            parser: ParserConfig::with_max_item_size(settings.limits.max_item_size),
            settings,
            cache,
            workers: counters.clone(),
            connections: Default::default(),
            reset_base: Mutex::default(),
            shutdown: rx,
            auth,
            sasl,
            cluster_config,
            tls,
            crawler: Default::default(),
            debug_clock,
            flash: flash_files,
        });
        let mut threads = Vec::new();
        let sockets = listeners.into_iter().zip(udp_sockets);
        for (i, ((listener, udp), counters)) in sockets.zip(counters).enumerate() {
            let server = server.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("memfleet-worker-{i}"))
                    .spawn(move || worker::run(server, counters, listener, udp, SHUTDOWN_GRACE))?,
            );
        }
        if let Some(listener) = admin {
            let server = server.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("memfleet-admin".into())
                    .spawn(move || {
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()?;
                        rt.block_on(async move {
                            let listener = tokio::net::TcpListener::from_std(listener)?;
                            admin::serve(listener, server).await;
                            Ok(())
                        })
                    })?,
            );
        }
        tracing::info!(
            %addr,
            threads = server.settings.limits.threads,
            memory_mib = server.settings.limits.memory_bytes >> 20,
            max_connections = server.settings.limits.max_connections,
            tls = server.tls.is_some(),
            "memfleet server listening"
        );
        Ok(Server {
            addr,
            admin_addr,
            shutdown: tx,
            threads,
            server,
            expirer: Some(expirer),
            memory_file,
            start,
        })
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The UDP address for reads, when enabled.
    pub fn udp_addr(&self) -> Option<SocketAddr> {
        self.server
            .settings
            .listen
            .udp_port
            .map(|port| SocketAddr::new(self.addr.ip(), port))
    }

    /// How the cache came up (warm restart or not).
    pub fn start_kind(&self) -> &warm::Start {
        &self.start
    }

    /// The `/metrics` address, when enabled.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// Reads the TLS certificate, key and CA files again and serves new connections with
    /// them; established connections keep their sessions. On an error the certificate in
    /// service stays. Without TLS there is nothing to reload.
    pub fn reload_tls(&self) -> anyhow::Result<()> {
        match &self.server.tls {
            Some(tls) => tls.reload(),
            None => Ok(()),
        }
    }

    /// The cache (for tests and embedding).
    pub fn cache(&self) -> &Cache {
        &self.server.cache
    }

    /// Stops accepting, lets open connections finish their current batch (briefly), and
    /// waits for every thread. With a memory file, then writes the warm-restart snapshot.
    pub fn shutdown(mut self) -> anyhow::Result<()> {
        let _ = self.shutdown.send(true);
        for t in std::mem::take(&mut self.threads) {
            t.join()
                .map_err(|_| anyhow::anyhow!("a server thread panicked"))?
                .context("a server thread failed")?;
        }
        // Nothing may change the engine while it is described: the workers' handles are
        // gone with their threads; stop the expirer too.
        drop(self.expirer.take());
        if let Some(file) = &self.memory_file {
            let started = std::time::Instant::now();
            let bytes = file.save(&self.server.cache)?;
            tracing::info!(
                snapshot_bytes = bytes,
                save_ms = started.elapsed().as_secs_f64() * 1000.0,
                "memory file: saved for a warm restart"
            );
        }
        Ok(())
    }
}

/// `memfleet server`: starts the server and runs it until SIGINT, SIGTERM or SIGUSR1;
/// SIGHUP reloads the TLS certificate.
pub fn run(args: &ServerArgs) -> anyhow::Result<()> {
    let settings = Settings::resolve(args)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // The handlers are in place before the port opens: a signal sent as soon as the server
    // answers must stop it cleanly, not kill it with the default action.
    let (mut int, mut term, mut usr1, mut hup) = {
        use tokio::signal::unix::{signal, SignalKind};
        let _runtime = rt.enter();
        (
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
            // memcached's signal for "stop, keeping the memory file for a restart".
            signal(SignalKind::user_defined1())?,
            // Reload the TLS files (and, without TLS, no longer die of a stray SIGHUP).
            signal(SignalKind::hangup())?,
        )
    };
    let server = Server::start(settings)?;
    // Every listener is bound (each worker's TCP socket, UDP, the admin port): connections
    // are queued from now on, so systemd may start what depends on this server.
    notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&serving_status(&server)),
    ]);
    rt.block_on(async {
        loop {
            tokio::select! {
                _ = int.recv() => break,
                _ = term.recv() => break,
                _ = usr1.recv() => break,
                _ = hup.recv() => {
                    if server.server.tls.is_none() {
                        tracing::info!("SIGHUP: no TLS certificate to reload");
                    }
                    // A failure is logged and counted; the old certificate stays.
                    let _ = server.reload_tls();
                }
            }
        }
    });
    tracing::info!("shutting down");
    let status = match server.memory_file {
        Some(_) => "stopping: saving the memory file for a warm restart",
        None => "stopping",
    };
    notify(&[
        sd_notify::NotifyState::Stopping,
        sd_notify::NotifyState::Status(status),
    ]);
    server.shutdown()?;
    tracing::info!("stopped");
    Ok(())
}

/// Tells the service manager (systemd's `sd_notify(3)` protocol) when it started this process
/// with `NOTIFY_SOCKET`; without it nothing is sent. A notification that cannot be sent is
/// logged, never fatal: the server serves either way.
fn notify(states: &[sd_notify::NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "cannot notify the service manager (NOTIFY_SOCKET)");
    }
}

/// The `STATUS=` line `systemctl status` shows once the server serves.
fn serving_status(server: &Server) -> String {
    let mut status = format!("serving on {}", server.local_addr());
    if let Some(udp) = server.udp_addr() {
        status += &format!(", UDP {udp}");
    }
    if let Some(admin) = server.admin_addr() {
        status += &format!(", /metrics on {admin}");
    }
    match server.start_kind() {
        warm::Start::Plain => {}
        warm::Start::Warm { items, .. } => status += &format!("; warm restart: {items} items"),
        warm::Start::Cold(why) => status += &format!("; memory file started empty: {why}"),
    }
    status
}

/// Opens `--flash`'s files (segments of the engine's size), if any.
fn open_flash(settings: &Settings) -> anyhow::Result<Option<Arc<memfleet_flash::FlashFiles>>> {
    if settings.flash.files.is_empty() {
        return Ok(None);
    }
    let options = memfleet_flash::FlashOptions {
        segment_size: settings.segment_size(),
        read_threads: settings.flash.threads,
        delay: settings.flash.test_delay,
        ..memfleet_flash::FlashOptions::default()
    };
    let files =
        memfleet_flash::FlashFiles::open(&settings.flash.files, options).context("--flash")?;
    if !files.direct() {
        tracing::warn!(
            "the flash file system refused O_DIRECT: flash I/O goes through the page cache"
        );
    }
    tracing::info!(
        segments = files.segments(),
        segment_mib = settings.segment_size() >> 20,
        direct = files.direct(),
        "flash tier"
    );
    Ok(Some(Arc::new(files)))
}

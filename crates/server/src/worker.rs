//! Worker threads: each runs its own single-threaded tokio runtime with its own listening
//! socket on the shared port (SO_REUSEPORT lets the kernel spread new connections across
//! them), its own engine handle and its own reusable read and write buffers.
//!
//! Why one runtime per thread rather than tokio's work-stealing scheduler: a connection then
//! never changes threads, so its requests run on the thread that owns the engine handle and
//! the buffers, with no `Send` bounds, no atomics on the request path and warm caches; and the
//! per-thread buffers (the 2008 Facebook post's lesson) need no locking.

use crate::conn_stats::ConnInfo;
use crate::connection;
use crate::state::{ServerState, WorkerContext};
use crate::stats::WorkerCounters;
use crate::transport::{TlsTransport, Transport};
use memfleet_protocol::response;
use socket2::{Domain, Protocol, Socket, Type};
use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Binds and listens on `addr` without SO_REUSEPORT: fails if anyone listens there already.
/// (The port is then released and taken again by [`bind`] for every worker.)
pub fn bind_exclusive(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1)?;
    Ok(socket.into())
}

/// Binds one listening socket. Every worker binds its own with SO_REUSEPORT.
pub fn bind(addr: SocketAddr, backlog: u32) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    Ok(socket.into())
}

/// Runs a worker until shutdown: accepts on `listener`, serves connections, then ends them
/// between batches (waiting up to `grace` for them to close).
pub fn run(
    server: Arc<ServerState>,
    counters: Arc<WorkerCounters>,
    listener: std::net::TcpListener,
    udp: Option<std::net::UdpSocket>,
    grace: Duration,
) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    let ctx = Rc::new(WorkerContext {
        handle: RefCell::new(server.cache.handle()),
        server,
        counters,
        read_buf: RefCell::new(Vec::with_capacity(connection::READ_CHUNK * 2)),
        write_buf: RefCell::new(Vec::with_capacity(connection::WRITE_BUDGET * 2)),
        open: RefCell::default(),
        next_id: Cell::new(0),
        flash_ring: Default::default(),
    });
    local.block_on(&runtime, async move {
        // Listed in `stats conns` while they are open.
        let table = ctx.server.connections.table.clone();
        let mut listed = vec![(listener.as_raw_fd(), listener.local_addr()?, false)];
        if let Some(socket) = &udp {
            listed.push((socket.as_raw_fd(), socket.local_addr()?, true));
        }
        let listed: Vec<_> = listed
            .into_iter()
            .map(|(fd, addr, udp)| (fd, table.listener(fd, addr, udp)))
            .collect();
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let udp =
            udp.map(|socket| tokio::task::spawn_local(crate::udp::serve(ctx.clone(), socket)));
        accept_loop(&ctx, listener).await;
        for (fd, info) in &listed {
            table.remove(*fd, info);
        }
        if let Some(task) = udp {
            // It watches the same shutdown signal.
            let _ = task.await;
        }
        // Every connection task is parked at an await, so between batches (or waiting for a
        // slow client to take its replies): end them there. An aborted task drops its
        // socket (closing it) when the runtime next gets to it; give that up to `grace`.
        let open: Vec<_> = ctx.open.borrow().values().cloned().collect();
        for task in open {
            task.abort();
        }
        let deadline = tokio::time::Instant::now() + grace;
        while !ctx.open.borrow().is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(())
    })
}

async fn accept_loop(ctx: &Rc<WorkerContext>, listener: tokio::net::TcpListener) {
    let mut shutdown = ctx.server.shutdown.clone();
    loop {
        if *shutdown.borrow() {
            return;
        }
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.changed() => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning, as
                // memcached does when it stops accepting (and counts it as it does).
                tracing::warn!(error = %e, "accept failed");
                let paused = std::time::Instant::now();
                tokio::time::sleep(Duration::from_millis(10)).await;
                let conns = &ctx.server.connections;
                conns.listen_disabled.fetch_add(1, Ordering::Relaxed);
                conns
                    .listen_disabled_us
                    .fetch_add(paused.elapsed().as_micros() as u64, Ordering::Relaxed);
                continue;
            }
        };
        let conns = &ctx.server.connections;
        if conns.current.fetch_add(1, Ordering::AcqRel)
            >= ctx.server.settings.limits.max_connections
        {
            conns.current.fetch_sub(1, Ordering::AcqRel);
            conns.rejected.fetch_add(1, Ordering::Relaxed);
            tokio::task::spawn_local(async move {
                let mut stream = stream;
                let _ = stream.write_all(response::TOO_MANY_CONNECTIONS).await;
                let _ = stream.shutdown().await;
            });
            continue;
        }
        conns.total.fetch_add(1, Ordering::Relaxed);
        let _ = stream.set_nodelay(true);
        let id = ctx.next_id.get();
        ctx.next_id.set(id + 1);
        // Made before the task is spawned, so that even a task aborted before its first
        // poll (shutdown right after accept) releases its place when it is dropped.
        let fd = stream.as_raw_fd();
        let unknown = SocketAddr::from(([0, 0, 0, 0], 0));
        let info = conns.table.connection(
            fd,
            stream.peer_addr().unwrap_or(unknown),
            stream.local_addr().unwrap_or(unknown),
        );
        let open = OpenConnection {
            ctx: ctx.clone(),
            id,
            fd,
            info,
        };
        // Two task types, so that a plaintext connection's task is not sized for a TLS
        // session it does not have.
        let task = match ctx.server.tls.clone() {
            None => tokio::task::spawn_local(async move { serve_tracked(&open, stream).await }),
            Some(tls) => tokio::task::spawn_local(serve_tls(open, tls, stream)),
        };
        if !task.is_finished() {
            ctx.open.borrow_mut().insert(id, task.abort_handle());
        }
    }
}

/// Runs the TLS handshake, then serves the connection over the session.
async fn serve_tls(
    open: OpenConnection,
    tls: Arc<memfleet_tls::ServerTls>,
    stream: tokio::net::TcpStream,
) {
    let session = match tls.accept(stream).await {
        Ok(session) => session,
        Err(e) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            return;
        }
    };
    let (socket, session) = session.into_inner();
    serve_tracked(&open, TlsTransport::new(socket, session)).await;
}

/// Serves the connection over `stream`, its traffic counted in the connection table.
async fn serve_tracked<T: Transport>(open: &OpenConnection, stream: T) {
    let stream = open
        .ctx
        .server
        .connections
        .table
        .track(stream, open.info.clone());
    if let Err(e) = connection::serve(&open.ctx, stream).await {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// Accounts for an open connection; dropping it (the task ended or was aborted) releases
/// its place under the connection limit.
struct OpenConnection {
    ctx: Rc<WorkerContext>,
    id: u64,
    /// Its socket's descriptor and `stats conns` entry.
    fd: i32,
    info: Arc<ConnInfo>,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.ctx.open.borrow_mut().remove(&self.id);
        self.ctx
            .server
            .connections
            .table
            .remove(self.fd, &self.info);
        self.ctx
            .server
            .connections
            .current
            .fetch_sub(1, Ordering::AcqRel);
    }
}

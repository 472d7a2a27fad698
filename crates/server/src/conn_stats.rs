//! What `stats conns` reports: every open socket (listeners, UDP sockets, client
//! connections) by file descriptor, as memcached lists its connections, with each client
//! connection's state and the time since it last sent a request.
//!
//! A client connection is tracked by wrapping its [`Transport`] in [`Tracked`], which notes
//! each read that brought bytes (a request arriving) and each wait: one relaxed store per
//! read, on a cache line only this connection's worker writes.

use crate::transport::Transport;
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// memcached's names for the states memfleet's connections pass through.
const STATES: [&str; 5] = [
    "conn_listening",
    "conn_parse_cmd",
    "conn_waiting",
    "conn_mwrite",
    "conn_read",
];
const PARSE_CMD: u8 = 1;
const WAITING: u8 = 2;
const MWRITE: u8 = 3;

/// One socket's entry.
#[derive(Debug)]
pub struct ConnInfo {
    /// `tcp:` or `udp:`.
    transport: &'static str,
    /// The socket's own address (a listener's) or the peer's (a client connection's).
    addr: SocketAddr,
    /// The listener a client connection came in on.
    listen_addr: Option<SocketAddr>,
    state: AtomicU8,
    /// Seconds since `ConnTable::started` when the last request arrived.
    last_cmd: AtomicU32,
}

/// Every open socket, by file descriptor (what memcached keys `stats conns` by).
#[derive(Debug)]
pub struct ConnTable {
    conns: Mutex<BTreeMap<i32, Arc<ConnInfo>>>,
    started: Instant,
}

impl Default for ConnTable {
    fn default() -> Self {
        ConnTable {
            conns: Mutex::default(),
            started: Instant::now(),
        }
    }
}

impl ConnTable {
    fn now(&self) -> u32 {
        self.started.elapsed().as_secs() as u32
    }

    fn insert(&self, fd: i32, info: ConnInfo) -> Arc<ConnInfo> {
        let info = Arc::new(info);
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        conns.insert(fd, info.clone());
        info
    }

    /// Lists a listening socket (`udp`: a UDP socket, shown reading, as memcached shows it)
    /// until [`ConnTable::remove`].
    pub fn listener(&self, fd: i32, addr: SocketAddr, udp: bool) -> Arc<ConnInfo> {
        let (transport, state) = if udp { ("udp", 4) } else { ("tcp", 0) };
        self.insert(
            fd,
            ConnInfo {
                transport,
                addr,
                listen_addr: None,
                state: AtomicU8::new(state),
                last_cmd: AtomicU32::new(self.now()),
            },
        )
    }

    /// Lists a client connection until [`ConnTable::remove`].
    pub fn connection(&self, fd: i32, peer: SocketAddr, local: SocketAddr) -> Arc<ConnInfo> {
        self.insert(
            fd,
            ConnInfo {
                transport: "tcp",
                addr: peer,
                listen_addr: Some(local),
                state: AtomicU8::new(WAITING),
                last_cmd: AtomicU32::new(self.now()),
            },
        )
    }

    /// Forgets a socket (closed), unless its descriptor has already been reused by a
    /// newer one.
    pub fn remove(&self, fd: i32, info: &Arc<ConnInfo>) {
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        if conns.get(&fd).is_some_and(|c| Arc::ptr_eq(c, info)) {
            conns.remove(&fd);
        }
    }

    /// The `stats conns` lines, memcached's: `<fd>:addr`, `<fd>:listen_addr` (client
    /// connections), `<fd>:state`, `<fd>:secs_since_last_cmd`.
    pub fn rows(&self) -> Vec<(String, String)> {
        let now = self.now();
        let conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        let mut rows = Vec::with_capacity(conns.len() * 4);
        for (fd, c) in conns.iter() {
            rows.push((format!("{fd}:addr"), format!("{}:{}", c.transport, c.addr)));
            if let Some(l) = c.listen_addr {
                rows.push((format!("{fd}:listen_addr"), format!("{}:{l}", c.transport)));
            }
            let state = STATES[usize::from(c.state.load(Ordering::Relaxed))];
            rows.push((format!("{fd}:state"), state.to_string()));
            let since = now.saturating_sub(c.last_cmd.load(Ordering::Relaxed));
            rows.push((format!("{fd}:secs_since_last_cmd"), since.to_string()));
        }
        rows
    }

    /// Wraps a client connection's transport so that its entry follows it.
    pub(crate) fn track<T: Transport>(
        self: &Arc<Self>,
        inner: T,
        info: Arc<ConnInfo>,
    ) -> Tracked<T> {
        Tracked {
            inner,
            info,
            table: self.clone(),
        }
    }
}

/// A client connection's transport, noting requests and waits in its [`ConnInfo`].
pub(crate) struct Tracked<T> {
    inner: T,
    info: Arc<ConnInfo>,
    table: Arc<ConnTable>,
}

impl<T> Tracked<T> {
    fn set(&self, state: u8) {
        self.info.state.store(state, Ordering::Relaxed);
    }
}

impl<T: Transport> Transport for Tracked<T> {
    #[inline]
    fn try_read_buf(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let r = self.inner.try_read_buf(buf);
        match &r {
            Ok(n) if *n > 0 => {
                self.info
                    .last_cmd
                    .store(self.table.now(), Ordering::Relaxed);
                self.set(PARSE_CMD);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.set(WAITING),
            _ => {}
        }
        r
    }

    #[inline]
    async fn readable(&self) -> io::Result<()> {
        self.inner.readable().await
    }

    #[inline]
    fn try_write(&mut self, data: &[u8]) -> io::Result<usize> {
        let r = self.inner.try_write(data);
        if matches!(&r, Err(e) if e.kind() == io::ErrorKind::WouldBlock) {
            self.set(MWRITE);
        }
        r
    }

    #[inline]
    fn try_flush(&mut self) -> io::Result<bool> {
        self.inner.try_flush()
    }

    #[inline]
    async fn writable(&self) -> io::Result<()> {
        self.inner.writable().await
    }

    fn close(&mut self) {
        self.inner.close();
    }
}

//! [`DnsServer`]: an authoritative DNS server a test runs in-process, whose zone the test
//! changes while it runs (DNS-discovered pools, issue 27).
//!
//! It listens on one port for UDP and TCP (answers too big for a UDP datagram go out
//! truncated, and the client asks again over TCP), answers A, AAAA and SRV records from an
//! in-memory zone, and can play a dead server ([`Mode::Down`]), an empty answer, SERVFAIL or
//! NXDOMAIN ([`Mode`]). Two threads with blocking sockets serve it (plus one per open TCP
//! connection), so it works from plain `#[test]` functions and from tokio tests alike; it stops
//! when dropped.
//!
//! ```no_run
//! use memfleet_testkit::dns::{DnsServer, Mode};
//! let dns = DnsServer::start();
//! dns.set_srv("_memcache._tcp.mf.test", &[("mf-0.mf.test", 11211)], 5);
//! dns.set_a("mf-0.mf.test", &["127.0.0.1".parse().unwrap()], 5);
//! // point the router at `nameservers = ["{dns.addr()}"]`, then e.g.
//! dns.set_mode(Mode::Down);
//! ```
//!
//! What it answers, in [`Mode::Answer`]:
//! - a name it was never given, or was [`DnsServer::remove`]d: NXDOMAIN;
//! - A / AAAA: the name's IPv4 / IPv6 addresses set by [`DnsServer::set_a`]; SRV: its SRV
//!   records, with the targets' known A and AAAA records in the additional section (as CoreDNS
//!   does); ANY: all of them; any other type of a known name: NOERROR with no answers;
//! - negative answers carry no SOA, so resolvers do not cache them;
//! - a UDP answer larger than 512 bytes (or the query's EDNS payload size, up to 4096) loses
//!   its additional section first, then goes out with no records and the TC bit set.
//!
//! Malformed datagrams, responses and messages without a question are ignored (not counted).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, SRV};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};

/// How [`DnsServer`] answers every query, whatever its zone holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// From the zone (the default).
    #[default]
    Answer,
    /// No answer at all, over UDP or TCP, as from a dead server: clients time out.
    Down,
    /// NOERROR with no records, for every name.
    Empty,
    /// SERVFAIL for every name.
    ServFail,
    /// NXDOMAIN for every name.
    NxDomain,
}

/// One SRV record: where a service's member is ([`DnsServer::set_srv_records`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Srv {
    /// Lower is preferred.
    pub priority: u16,
    /// Relative weight among records of the same priority.
    pub weight: u16,
    /// The member's port.
    pub port: u16,
    /// The member's host name (with or without the final dot).
    pub target: String,
}

impl Srv {
    /// Priority 0, weight 1: what Kubernetes' DNS gives each pod of a headless Service.
    pub fn new(target: &str, port: u16) -> Self {
        Self {
            priority: 0,
            weight: 1,
            port,
            target: target.to_string(),
        }
    }
}

/// The largest UDP answer sent when a query carries an EDNS payload size above it.
const MAX_UDP: usize = 4096;
/// How long a blocked socket waits before it looks whether the server is stopping.
const POLL: Duration = Duration::from_millis(100);

/// An authoritative DNS server on its own threads, its zone changed through `&self`; stopped
/// (threads joined) when dropped. See the [module](self) documentation for what it answers.
pub struct DnsServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for DnsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DnsServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl DnsServer {
    /// Starts a server on 127.0.0.1, UDP and TCP on one ephemeral port, with an empty zone.
    ///
    /// # Panics
    /// If no port can be bound (see [`DnsServer::start_on`] for the fallible form).
    pub fn start() -> Self {
        Self::start_on(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .expect("start the test DNS server on 127.0.0.1")
    }

    /// Starts a server on `addr` (UDP and TCP on the same port; port 0: one free for both),
    /// e.g. on an address of a network namespace's or a podman network's gateway.
    pub fn start_on(addr: SocketAddr) -> io::Result<Self> {
        let (udp, tcp) = bind_pair(addr)?;
        let addr = udp.local_addr()?;
        udp.set_read_timeout(Some(POLL))?;
        let shared = Arc::new(Shared::default());
        let udp_thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("dns-udp".into())
                .spawn(move || serve_udp(&udp, &shared))?
        };
        let mut server = Self {
            addr,
            shared,
            threads: vec![udp_thread],
        };
        let shared = Arc::clone(&server.shared);
        // On an error, dropping `server` stops and joins the UDP thread.
        let tcp_thread = std::thread::Builder::new()
            .name("dns-tcp".into())
            .spawn(move || serve_tcp_listener(&tcp, &shared))?;
        server.threads.push(tcp_thread);
        Ok(server)
    }

    /// Where it listens (the same port for UDP and TCP).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets the address records of `name` (A for each IPv4 address, AAAA for each IPv6), all
    /// with `ttl` seconds, replacing the ones it had; its SRV records stay. An empty `addrs`
    /// leaves the name known with no addresses (NOERROR, no answers); [`DnsServer::remove`]
    /// makes it unknown.
    ///
    /// # Panics
    /// If `name` is not a valid DNS name.
    pub fn set_a(&self, name: &str, addrs: &[IpAddr], ttl: u32) {
        let mut zone = self.shared.zone();
        let entry = zone.names.entry(key(name)).or_default();
        entry.addrs = addrs.to_vec();
        entry.addr_ttl = ttl;
    }

    /// Sets the SRV records of `name` to one per `(target, port)`, priority 0, weight 1, all
    /// with `ttl` seconds, replacing the ones it had; its address records stay.
    ///
    /// # Panics
    /// If `name` or a target is not a valid DNS name.
    pub fn set_srv(&self, name: &str, targets: &[(&str, u16)], ttl: u32) {
        let records: Vec<Srv> = targets
            .iter()
            .map(|&(target, port)| Srv::new(target, port))
            .collect();
        self.set_srv_records(name, &records, ttl);
    }

    /// [`DnsServer::set_srv`] with each record's priority and weight given.
    ///
    /// # Panics
    /// If `name` or a target is not a valid DNS name.
    pub fn set_srv_records(&self, name: &str, records: &[Srv], ttl: u32) {
        let srv = records
            .iter()
            .map(|r| SRV::new(r.priority, r.weight, r.port, fqdn(&key(&r.target))))
            .collect();
        let mut zone = self.shared.zone();
        let entry = zone.names.entry(key(name)).or_default();
        entry.srv = srv;
        entry.srv_ttl = ttl;
    }

    /// Forgets `name` and all its records: it answers NXDOMAIN from now on.
    ///
    /// # Panics
    /// If `name` is not a valid DNS name.
    pub fn remove(&self, name: &str) {
        self.shared.zone().names.remove(&key(name));
    }

    /// How every query is answered from now on.
    pub fn set_mode(&self, mode: Mode) {
        self.shared.zone().mode = mode;
    }

    /// How many queries it received (UDP and TCP, answered or not, in every mode).
    pub fn queries(&self) -> u64 {
        self.shared.queries.load(Ordering::Relaxed)
    }

    /// How many of [`DnsServer::queries`] came over TCP.
    pub fn tcp_queries(&self) -> u64 {
        self.shared.tcp_queries.load(Ordering::Relaxed)
    }

    /// How many queries it received for `name`, any type (names compared case-insensitively).
    ///
    /// # Panics
    /// If `name` is not a valid DNS name.
    pub fn queries_for(&self, name: &str) -> u64 {
        lock(&self.shared.per_name)
            .get(&key(name))
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the threads blocked in recv_from and accept; the UDP one also wakes on its own.
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            });
        }
        let any: SocketAddr = if wake.is_ipv4() {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (Ipv6Addr::UNSPECIFIED, 0).into()
        };
        if let Ok(socket) = UdpSocket::bind(any) {
            let _ = socket.send_to(&[0], wake);
        }
        let tcp_woken = TcpStream::connect_timeout(&wake, Duration::from_secs(1)).is_ok();
        for (i, thread) in self.threads.drain(..).enumerate() {
            // Thread 1 is the TCP accept loop: without a wake-up it would block forever.
            if i == 0 || tcp_woken {
                let _ = thread.join();
            }
        }
    }
}

/// The zone, the mode and the counters, shared with the serving threads.
#[derive(Default)]
struct Shared {
    zone: Mutex<Zone>,
    stop: AtomicBool,
    queries: AtomicU64,
    tcp_queries: AtomicU64,
    per_name: Mutex<HashMap<String, u64>>,
}

#[derive(Default)]
struct Zone {
    mode: Mode,
    /// Keyed by [`key`]: lower case, no final dot.
    names: HashMap<String, Entry>,
}

#[derive(Default)]
struct Entry {
    addrs: Vec<IpAddr>,
    addr_ttl: u32,
    srv: Vec<SRV>,
    srv_ttl: u32,
}

impl Entry {
    fn addresses(&self, owner: &Name, v4: bool, v6: bool) -> impl Iterator<Item = Record> + '_ {
        let owner = owner.clone();
        self.addrs.iter().filter_map(move |ip| {
            let data = match ip {
                IpAddr::V4(ip) if v4 => RData::A(A(*ip)),
                IpAddr::V6(ip) if v6 => RData::AAAA(AAAA(*ip)),
                _ => return None,
            };
            Some(Record::from_rdata(owner.clone(), self.addr_ttl, data))
        })
    }
}

impl Shared {
    fn zone(&self) -> MutexGuard<'_, Zone> {
        lock(&self.zone)
    }

    /// The answer to one query message, or `None` when there is nothing to send.
    fn handle(&self, bytes: &[u8], tcp: bool) -> Option<Vec<u8>> {
        let request = Message::from_vec(bytes).ok()?;
        if request.metadata.message_type != MessageType::Query {
            return None;
        }
        let query = request.queries.first()?.clone();
        self.queries.fetch_add(1, Ordering::Relaxed);
        if tcp {
            self.tcp_queries.fetch_add(1, Ordering::Relaxed);
        }
        let name = name_key(query.name());
        *lock(&self.per_name).entry(name.clone()).or_default() += 1;

        let mut response = Message::response(request.metadata.id, request.metadata.op_code);
        response.metadata.authoritative = true;
        response.metadata.recursion_desired = request.metadata.recursion_desired;
        response.metadata.checking_disabled = request.metadata.checking_disabled;
        response.add_query(query.clone());
        if request.edns.is_some() {
            let mut edns = Edns::new();
            edns.set_max_payload(MAX_UDP as u16);
            response.set_edns(edns);
        }
        // Read apart: a guard in the `match` below would live through `answer`, which locks too.
        let mode = self.zone().mode;
        let code = if request.metadata.op_code != OpCode::Query {
            ResponseCode::NotImp
        } else if query.query_class() != DNSClass::IN {
            ResponseCode::Refused
        } else {
            match mode {
                Mode::Down => return None,
                Mode::Empty => ResponseCode::NoError,
                Mode::ServFail => ResponseCode::ServFail,
                Mode::NxDomain => ResponseCode::NXDomain,
                Mode::Answer => self.answer(&name, &query, &mut response),
            }
        };
        response.metadata.response_code = code;

        let limit = match (&request.edns, tcp) {
            (_, true) => usize::from(u16::MAX),
            (Some(edns), false) => usize::from(edns.max_payload()).clamp(512, MAX_UDP),
            (None, false) => 512,
        };
        let bytes = response.to_vec().ok()?;
        if bytes.len() <= limit {
            return Some(bytes);
        }
        response.additionals.clear();
        let bytes = response.to_vec().ok()?;
        if bytes.len() <= limit {
            return Some(bytes);
        }
        response.answers.clear();
        response.metadata.truncation = true;
        response.to_vec().ok()
    }

    /// Fills `response` from the zone; returns its response code.
    fn answer(&self, name: &str, query: &Query, response: &mut Message) -> ResponseCode {
        let zone = self.zone();
        let Some(entry) = zone.names.get(name) else {
            return ResponseCode::NXDomain;
        };
        // The owner name as asked (a resolver may randomise its case and check it).
        let owner = query.name();
        let (v4, v6, srv) = match query.query_type() {
            RecordType::A => (true, false, false),
            RecordType::AAAA => (false, true, false),
            RecordType::SRV => (false, false, true),
            RecordType::ANY => (true, true, true),
            _ => (false, false, false),
        };
        response.add_answers(entry.addresses(owner, v4, v6));
        if srv {
            for record in &entry.srv {
                let data = RData::SRV(record.clone());
                response.add_answer(Record::from_rdata(owner.clone(), entry.srv_ttl, data));
                if let Some(target) = zone.names.get(&name_key(&record.target)) {
                    response.add_additionals(target.addresses(&record.target, true, true));
                }
            }
        }
        ResponseCode::NoError
    }
}

/// Binds UDP and TCP on one port of `addr`'s address (its port, or when 0 one free for both).
fn bind_pair(addr: SocketAddr) -> io::Result<(UdpSocket, TcpListener)> {
    let mut last = None;
    for _ in 0..if addr.port() == 0 { 64 } else { 1 } {
        let udp = UdpSocket::bind(addr)?;
        match TcpListener::bind(udp.local_addr()?) {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no port free for both UDP and TCP")))
}

fn serve_udp(socket: &UdpSocket, shared: &Shared) {
    let mut buf = vec![0u8; 65536];
    while !shared.stop.load(Ordering::SeqCst) {
        match socket.recv_from(&mut buf) {
            Ok((n, peer)) => {
                if shared.stop.load(Ordering::SeqCst) {
                    break;
                }
                if let Some(answer) = shared.handle(&buf[..n], false) {
                    let _ = socket.send_to(&answer, peer);
                }
            }
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            // E.g. ECONNREFUSED left by an ICMP error from an earlier answer's peer.
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

fn serve_tcp_listener(listener: &TcpListener, shared: &Arc<Shared>) {
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = conn else {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        let shared = Arc::clone(shared);
        // A connection not served (no thread) is closed by dropping it.
        let _ = std::thread::Builder::new()
            .name("dns-tcp-conn".into())
            .spawn(move || serve_tcp(stream, &shared));
    }
}

/// Length-prefixed messages (RFC 1035 §4.2.2) until the peer closes or the server stops.
fn serve_tcp(mut stream: TcpStream, shared: &Shared) {
    if stream.set_read_timeout(Some(POLL)).is_err() {
        return;
    }
    loop {
        let mut len = [0u8; 2];
        if !read_full(&mut stream, &mut len, shared) {
            return;
        }
        let mut message = vec![0u8; usize::from(u16::from_be_bytes(len))];
        if !read_full(&mut stream, &mut message, shared) {
            return;
        }
        if let Some(answer) = shared.handle(&message, true) {
            let Ok(len) = u16::try_from(answer.len()) else {
                continue;
            };
            let mut framed = len.to_be_bytes().to_vec();
            framed.extend_from_slice(&answer);
            if stream.write_all(&framed).is_err() {
                return;
            }
        }
    }
}

/// Fills `buf`; false when the peer closed, an error came or the server is stopping.
fn read_full(stream: &mut TcpStream, buf: &mut [u8], shared: &Shared) -> bool {
    let mut filled = 0;
    while filled < buf.len() {
        if shared.stop.load(Ordering::SeqCst) {
            return false;
        }
        match stream.read(&mut buf[filled..]) {
            Ok(0) => return false,
            Ok(n) => filled += n,
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// A name as the zone keys it: lower case, without the final dot.
///
/// # Panics
/// If `name` is not a valid DNS name.
fn key(name: &str) -> String {
    let parsed =
        Name::from_ascii(name).unwrap_or_else(|e| panic!("invalid DNS name {name:?}: {e}"));
    name_key(&parsed)
}

fn name_key(name: &Name) -> String {
    let mut text = name.to_lowercase().to_ascii();
    if text.ends_with('.') {
        text.pop();
    }
    text
}

/// The fully qualified name of a zone key.
fn fqdn(key: &str) -> Name {
    Name::from_ascii(format!("{key}.")).unwrap_or_else(|e| panic!("invalid DNS name {key:?}: {e}"))
}

/// Locks `mutex`, even one a panicking thread left poisoned (the data stays consistent: every
/// critical section here is a single assignment).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

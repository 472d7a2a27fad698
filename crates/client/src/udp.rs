//! Gets over UDP (Facebook §3.1): no connection to hold, so a web server can fetch from
//! thousands of servers; the paper measured 20% lower latency than TCP. Only gets: sets and
//! deletes need TCP's reliability.
//!
//! memcached's framing: every datagram starts with 8 bytes, big-endian — request id,
//! sequence number, datagrams in the message, reserved. One socket serves all of a client's
//! UDP gets; a task receives every datagram and hands it to the get waiting for its request
//! id. A reply is whole when datagrams `0..count` arrived in order. A datagram that arrives
//! out of order (reordering) or one that never arrives (a drop, seen as a timeout) makes the
//! get **lost**: the caller treats it as a miss, and the look-aside helper does not fill the
//! cache after it, since the loss may mean an overloaded server or network (paper §3.1).

use memfleet_protocol::udp::{Header, Progress, Reassembly, HEADER_LEN};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::sync::oneshot;

/// Largest datagram accepted (memcached sends at most 1,400 bytes).
const MAX_DATAGRAM: usize = 65_536;
/// Largest reply reassembled (memfleet's server refuses bigger ones over UDP).
const MAX_REPLY: usize = 1 << 20;

/// What a UDP get came back with.
#[derive(Debug, PartialEq, Eq)]
pub enum UdpReply {
    /// The whole reply payload, in order.
    Reply(Vec<u8>),
    /// A datagram was dropped or reordered: count it as a miss, and do not fill.
    Lost,
}

/// Counters of a client's UDP gets.
#[derive(Default, Debug)]
pub struct UdpCounters {
    /// Gets sent.
    pub sent: AtomicU64,
    /// Replies received whole.
    pub complete: AtomicU64,
    /// Gets lost to a missing datagram (timeout).
    pub dropped: AtomicU64,
    /// Gets lost to a datagram out of order (reordered, or the one after a drop).
    pub reordered: AtomicU64,
}

struct Pending {
    server: SocketAddr,
    reply: Reassembly,
    done: oneshot::Sender<UdpReply>,
}

/// The UDP side of a client.
pub struct UdpGets {
    socket: Arc<UdpSocket>,
    next_id: AtomicU16,
    pending: Arc<Mutex<HashMap<u16, Pending>>>,
    timeout: Duration,
    counters: Arc<UdpCounters>,
    receiver: tokio::task::JoinHandle<()>,
}

impl Drop for UdpGets {
    fn drop(&mut self) {
        self.receiver.abort();
    }
}

impl UdpGets {
    /// A socket for UDP gets that wait at most `timeout` for a whole reply. Must be called
    /// inside a tokio runtime.
    pub fn new(timeout: Duration) -> std::io::Result<UdpGets> {
        let std_socket = std::net::UdpSocket::bind("0.0.0.0:0")?;
        std_socket.set_nonblocking(true)?;
        let socket = Arc::new(UdpSocket::from_std(std_socket)?);
        let pending: Arc<Mutex<HashMap<u16, Pending>>> = Arc::default();
        let counters: Arc<UdpCounters> = Arc::default();
        let receiver = tokio::spawn(receive(socket.clone(), pending.clone(), counters.clone()));
        Ok(UdpGets {
            socket,
            next_id: AtomicU16::new(rand_start()),
            pending,
            timeout,
            counters,
            receiver,
        })
    }

    /// Its counters.
    pub fn counters(&self) -> &UdpCounters {
        &self.counters
    }

    /// Sends `request` (one complete `get`/`gets`/`mg` line) to `server` and waits for the
    /// whole reply.
    pub async fn request(&self, server: SocketAddr, request: &[u8]) -> std::io::Result<UdpReply> {
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            // Skip ids still waiting (65,536 of them wrap quickly under load).
            let mut id = self.next_id.fetch_add(1, Ordering::Relaxed);
            while pending.contains_key(&id) {
                id = self.next_id.fetch_add(1, Ordering::Relaxed);
            }
            pending.insert(
                id,
                Pending {
                    server,
                    reply: Reassembly::default(),
                    done: tx,
                },
            );
            id
        };
        let mut datagram = Vec::with_capacity(HEADER_LEN + request.len());
        Header::request(id).write(&mut datagram);
        datagram.extend_from_slice(request);
        self.counters.sent.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.socket.send_to(&datagram, server).await {
            self.forget(id);
            return Err(e);
        }
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(reply)) => Ok(reply),
            _ => {
                self.forget(id);
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                Ok(UdpReply::Lost)
            }
        }
    }

    fn forget(&self, id: u16) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }
}

/// Request ids start somewhere different in every process, so a late datagram meant for
/// an earlier process on the same port is unlikely to match.
fn rand_start() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish() as u16
}

/// Hands every datagram to the get waiting for it.
async fn receive(
    socket: Arc<UdpSocket>,
    pending: Arc<Mutex<HashMap<u16, Pending>>>,
    counters: Arc<UdpCounters>,
) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let Ok((n, from)) = socket.recv_from(&mut buf).await else {
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        };
        let Some((header, payload)) = Header::parse(&buf[..n]) else {
            continue;
        };
        let mut waiting = pending.lock().unwrap_or_else(|e| e.into_inner());
        let Some(p) = waiting.get_mut(&header.request_id) else {
            continue; // late, or not ours
        };
        if p.server != from {
            continue;
        }
        let outcome = match p.reply.add(header, payload, MAX_REPLY) {
            Progress::More => continue,
            Progress::Whole(reply) => {
                counters.complete.fetch_add(1, Ordering::Relaxed);
                UdpReply::Reply(reply)
            }
            // Out of order (or too big): the reply cannot be trusted to be whole; a miss.
            Progress::Lost => {
                counters.reordered.fetch_add(1, Ordering::Relaxed);
                UdpReply::Lost
            }
        };
        let p = waiting.remove(&header.request_id).expect("just found");
        let _ = p.done.send(outcome);
    }
}

//! memcached's UDP transport. Off unless `--udp-port` is given; then reads only (Facebook
//! §3.1: gets over UDP skip connection state and cut latency; sets and deletes stay on TCP),
//! or, with `--udp-writes`, every command memcached serves over UDP.
//!
//! Framing, as memcached's: every datagram starts with 8 bytes, big-endian
//!
//! ```text
//! 0-1 request id   2-3 sequence number   4-5 datagrams in this message   6-7 reserved (0)
//! ```
//!
//! A request must fit one datagram (sequence 0 of 1). Reads only: it holds exactly one
//! `get`, `gets` or `mg` (without `N`, `R`, `T` or `E`: nothing sent over UDP changes the
//! cache, not even a lease token); anything else is answered with an error line (or dropped
//! when the header itself is unusable). With `--udp-writes` the datagram is run like the
//! start of a TCP connection (`connection::process`): text or binary by its first byte, any
//! number of complete commands, `noreply` and quiet commands answered with nothing, as
//! memcached does. Either way, all the replies to one datagram form one message, cut into
//! datagrams of at most 1,400 bytes, each with the request id, its sequence number and the
//! count (`memfleet_protocol::udp`, which also reads the header). memcached sends one
//! message per reply instead (one per key of a multi-get), which a client cannot tell from
//! a lost datagram; one message per request is what such a client reassembles anyway.
//!
//! **Amplification.** A UDP reply goes to whatever source address the request claims, and a
//! 20-byte `get` can fetch a megabyte: in 2018 memcached servers open on UDP were used to
//! flood victims with spoofed requests (up to 50,000x amplification). memfleet therefore
//! keeps UDP off by default, listens on 127.0.0.1 unless told otherwise, serves only reads
//! unless `--udp-writes` (a spoofed write changes the cache with no trace of who sent it),
//! and refuses replies over [`MAX_UDP_REPLY`] bytes (a `SERVER_ERROR` instead). Enable UDP
//! only on a network where source addresses cannot be spoofed (a private cluster network),
//! never on an address reachable from the internet.
//!
//! Each worker thread has its own UDP socket on the shared port (SO_REUSEPORT), receives
//! on it and replies from it, with the worker's engine handle and counters.

use crate::connection::{process, Flow, ParseState};
use crate::execute::{AfterRequest, Executor};
use crate::state::WorkerContext;
use memfleet_protocol::response;
use memfleet_protocol::udp::{fragment, Header};
use memfleet_protocol::{binary, parse, GetKind, Request};
use socket2::{Domain, Protocol, Socket, Type};
use std::net::SocketAddr;
use std::rc::Rc;

/// The largest reply sent over UDP (about 47 datagrams); larger replies are refused.
pub const MAX_UDP_REPLY: usize = 64 * 1024;
/// The largest datagram read (anything longer is cut by the kernel and refused).
const MAX_REQUEST: usize = 64 * 1024;

/// Binds one worker's UDP socket; every worker binds its own with SO_REUSEPORT.
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// Runs the request in one datagram and returns the reply payload in `reply` (without
/// framing); `writes`: every command, not just reads. `false`: drop the datagram without
/// answering.
pub fn answer(exec: &mut Executor<'_>, datagram: &[u8], reply: &mut Vec<u8>, writes: bool) -> bool {
    let Some((header, payload)) = Header::parse(datagram) else {
        return false;
    };
    if !header.is_single() {
        reply.extend_from_slice(response::UDP_MULTI_PACKET);
        return true;
    }
    if writes {
        run_all(exec, payload, reply);
        return true;
    }
    if payload.first().is_some_and(|&b| binary::is_binary(b)) {
        reply.extend_from_slice(response::UDP_BINARY);
        return true;
    }
    let config = &exec.server.parser;
    let request = match parse(payload, config) {
        Ok((request, used)) if used == payload.len() => request,
        Ok(_) | Err(_) => {
            reply.extend_from_slice(response::UDP_NOT_ONE_REQUEST);
            return true;
        }
    };
    let is_read = match &request {
        Request::Get(g) => matches!(g.kind, GetKind::Get | GetKind::Gets),
        Request::MetaGet(_) => true,
        _ => false,
    };
    if !is_read {
        reply.extend_from_slice(response::UDP_NOT_A_READ);
        return true;
    }
    // A forged source address must not be able to change anything: no new TTL (T, which
    // can also delete), no placeholder or token (N, R), no explicit CAS (E). The executor
    // runs read-only too, so a stale item's token is not handed out either.
    if let Request::MetaGet(m) = &request {
        if [b'N', b'R', b'T', b'E'].iter().any(|f| m.flags.has(*f)) {
            reply.extend_from_slice(response::UDP_NO_SIDE_EFFECTS);
            return true;
        }
    }
    exec.counters.udp_requests.incr();
    match exec.run(&request, reply, 0, MAX_UDP_REPLY) {
        AfterRequest::Continue if reply.len() <= MAX_UDP_REPLY => {}
        _ => {
            exec.counters.udp_too_large.incr();
            reply.clear();
            reply.extend_from_slice(response::UDP_TOO_LARGE);
        }
    }
    true
}

/// Runs every command in `payload` as a TCP connection would run its first bytes; the
/// replies, at most [`MAX_UDP_REPLY`] bytes of them, go to `reply`.
fn run_all(exec: &mut Executor<'_>, payload: &[u8], reply: &mut Vec<u8>) {
    exec.counters.udp_requests.incr();
    let server = exec.server;
    let mut state = ParseState::default();
    let (used, flow) = process(
        exec,
        &server.parser,
        payload,
        &mut state,
        reply,
        MAX_UDP_REPLY,
    );
    match flow {
        // What ran has run; the rest of the replies cannot be sent.
        Flow::OutputFull if used < payload.len() || reply.len() > MAX_UDP_REPLY => {
            exec.counters.udp_too_large.incr();
            reply.clear();
            reply.extend_from_slice(response::UDP_TOO_LARGE);
        }
        // The rest of a command will not come: a datagram is the whole request.
        Flow::NeedInput if used < payload.len() => {
            reply.extend_from_slice(response::UDP_INCOMPLETE)
        }
        // UDP and flash are not combined (the settings refuse it), so no request waits.
        Flow::NeedInput | Flow::OutputFull | Flow::Flush | Flow::Close | Flow::FlashRead => {}
    }
}

/// Serves datagrams on `socket` until shutdown.
pub async fn serve(ctx: Rc<WorkerContext>, socket: std::net::UdpSocket) -> std::io::Result<()> {
    let socket = tokio::net::UdpSocket::from_std(socket)?;
    let mut shutdown = ctx.server.shutdown.clone();
    let writes = ctx.server.settings.listen.udp_writes;
    let mut datagram = vec![0u8; MAX_REQUEST];
    let mut reply = Vec::with_capacity(MAX_UDP_REPLY + 1024);
    let mut framed = Vec::with_capacity(MAX_UDP_REPLY * 2);
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        let (n, peer) = tokio::select! {
            r = socket.recv_from(&mut datagram) => match r {
                Ok(got) => got,
                Err(e) => {
                    tracing::debug!(error = %e, "udp receive failed");
                    continue;
                }
            },
            _ = shutdown.changed() => return Ok(()),
        };
        if reply.capacity() > 2 * MAX_UDP_REPLY {
            // A refused reply of one large value grew it: give that memory back.
            reply = Vec::with_capacity(MAX_UDP_REPLY + 1024);
        }
        reply.clear();
        let answered = {
            let mut handle = ctx.handle.borrow_mut();
            let mut exec = Executor {
                handle: &mut handle,
                counters: &ctx.counters,
                server: &ctx.server,
                read_only: !writes,
                pins: Default::default(),
                flash_items: Vec::new(),
            };
            answer(&mut exec, &datagram[..n], &mut reply, writes)
        };
        // Nothing to say (a quiet mg miss, a noreply write): send nothing, as memcached does.
        if !answered || reply.is_empty() {
            continue;
        }
        let request_id = Header::parse(&datagram[..n]).map_or(0, |(h, _)| h.request_id);
        framed.clear();
        // The reply is capped at MAX_UDP_REPLY, far below what a message can number.
        let Some(ends) = fragment(request_id, &reply, &mut framed) else {
            continue;
        };
        let mut start = 0;
        for end in ends {
            // A full send buffer drops the rest of the message, as UDP may anyway.
            if socket.send_to(&framed[start..end], peer).await.is_err() {
                break;
            }
            start = end;
        }
    }
}

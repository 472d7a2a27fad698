//! The "floor" proxy (`memfleet floor --port PORT --backend ADDR`): the least a memcached
//! proxy can do for the bench's requests, to bound what any proxy can cost on
//! this machine. It routes nothing (one backend), parses nothing beyond finding where a
//! request and a reply end, and keeps no statistics; what it spends is the socket I/O.
//!
//! Per round of `epoll_wait` (level-triggered): one `read` per readable client (its whole
//! requests are appended to the backend's output), one `read` of the backend if readable (its
//! whole replies are appended to their clients' outputs, matched in order), then one `send`
//! of everything for the backend and one `send` per client that got replies. That is the
//! syscall pattern of nutcracker and of `memfleet router` with the least possible around it:
//! one thread, no allocation per request, no tasks, no timers.
//!
//! It understands the requests `memfleet bench` sends (`get`, `set`, `quit`); anything else
//! is forwarded as a one-line request. It is a yardstick, not a product: no timeouts, no
//! reconnection (a backend failure ends it).

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};

use memfleet_protocol::reply::{frame, Frame, ReplyKind};

use crate::epoll::{set_nodelay, Epoll};

/// Events taken from the kernel per `epoll_wait`.
const EVENTS: usize = 256;
const LISTENER: u64 = u64::MAX;
const BACKEND: u64 = u64::MAX - 1;
/// Initial buffer size, per client and for the backend.
const BUFFER: usize = 16 * 1024;
/// Largest value a reply may carry.
const MAX_VALUE: usize = 1 << 20;

/// One client connection.
struct Client {
    fd: OwnedFd,
    /// Incarnation of this fd slot: a reply for a closed client's request is dropped.
    generation: u64,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    /// Waiting for EPOLLOUT.
    blocked: bool,
}

/// The backend connection and the order of requests sent on it.
struct Backend {
    fd: OwnedFd,
    out: Vec<u8>,
    inbuf: Vec<u8>,
    /// (client slot, its generation, reply shape) per request sent, oldest first.
    waiting: VecDeque<(usize, u64, ReplyKind)>,
    blocked: bool,
}

/// Proxies 127.0.0.1:`port` to `backend` until the process is killed or the backend fails.
pub fn serve(port: u16, backend: SocketAddr) -> io::Result<()> {
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    listener.set_nonblocking(true)?;
    let stream = TcpStream::connect(backend)?;
    stream.set_nonblocking(true)?;
    stream.set_nodelay(true)?;
    // SAFETY: into_raw_fd hands over ownership of a valid, open socket.
    let fd = unsafe { OwnedFd::from_raw_fd(stream.into_raw_fd()) };
    let epoll = Epoll::new()?;
    epoll.add(listener.as_raw_fd(), libc::EPOLLIN as u32, LISTENER)?;
    epoll.add(fd.as_raw_fd(), libc::EPOLLIN as u32, BACKEND)?;
    let mut backend = Backend {
        fd,
        out: Vec::with_capacity(BUFFER),
        inbuf: Vec::with_capacity(BUFFER),
        waiting: VecDeque::new(),
        blocked: false,
    };
    let mut clients: Vec<Option<Client>> = Vec::new();
    let mut generation = 0u64;
    let mut dirty: Vec<usize> = Vec::new();
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS];
    loop {
        let n = epoll.wait(&mut events)?;
        for ev in &events[..n] {
            let (token, flags) = (ev.u64, ev.events);
            match token {
                LISTENER => accept_all(&listener, &epoll, &mut clients, &mut generation),
                BACKEND => {
                    if flags & libc::EPOLLOUT as u32 != 0 {
                        backend.blocked = false;
                    }
                    if flags & (libc::EPOLLIN | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0 {
                        backend.on_readable(&mut clients, &mut dirty)?;
                    }
                }
                slot => {
                    let slot = slot as usize;
                    let Some(c) = clients.get_mut(slot).and_then(Option::as_mut) else {
                        continue;
                    };
                    if flags & libc::EPOLLOUT as u32 != 0 && c.blocked {
                        c.blocked = false;
                        dirty.push(slot);
                    }
                    if flags & (libc::EPOLLIN | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0
                        && !c.on_readable(slot, &mut backend)
                    {
                        clients[slot] = None;
                    }
                }
            }
        }
        if !backend.blocked && !backend.out.is_empty() {
            backend.blocked = !send_some(backend.fd.as_raw_fd(), &mut backend.out)?;
            let interest = if backend.blocked {
                libc::EPOLLIN | libc::EPOLLOUT
            } else {
                libc::EPOLLIN
            };
            epoll.modify(backend.fd.as_raw_fd(), interest as u32, BACKEND)?;
        }
        for slot in dirty.drain(..) {
            let Some(c) = clients.get_mut(slot).and_then(Option::as_mut) else {
                continue;
            };
            if c.blocked || c.wbuf.is_empty() {
                continue;
            }
            match send_some(c.fd.as_raw_fd(), &mut c.wbuf) {
                Ok(true) => {}
                Ok(false) => {
                    c.blocked = true;
                    let interest = (libc::EPOLLIN | libc::EPOLLOUT) as u32;
                    if epoll
                        .modify(c.fd.as_raw_fd(), interest, slot as u64)
                        .is_err()
                    {
                        clients[slot] = None;
                    }
                }
                Err(_) => clients[slot] = None,
            }
        }
    }
}

fn accept_all(
    listener: &TcpListener,
    epoll: &Epoll,
    clients: &mut Vec<Option<Client>>,
    generation: &mut u64,
) {
    while let Ok((stream, _)) = listener.accept() {
        if stream.set_nonblocking(true).is_err() {
            continue;
        }
        // SAFETY: into_raw_fd hands over ownership of a valid, open socket.
        let fd = unsafe { OwnedFd::from_raw_fd(stream.into_raw_fd()) };
        set_nodelay(fd.as_raw_fd());
        let slot = fd.as_raw_fd() as usize;
        if epoll
            .add(fd.as_raw_fd(), libc::EPOLLIN as u32, slot as u64)
            .is_err()
        {
            continue;
        }
        if clients.len() <= slot {
            clients.resize_with(slot + 1, || None);
        }
        *generation += 1;
        clients[slot] = Some(Client {
            fd,
            generation: *generation,
            rbuf: Vec::with_capacity(BUFFER),
            wbuf: Vec::with_capacity(BUFFER),
            blocked: false,
        });
    }
}

impl Client {
    /// Reads once and moves every complete request to the backend; false to close.
    fn on_readable(&mut self, slot: usize, backend: &mut Backend) -> bool {
        match read_some(self.fd.as_raw_fd(), &mut self.rbuf) {
            Ok(0) | Err(_) => return false,
            Ok(_) => {}
        }
        let mut at = 0;
        while let Some((len, kind)) = request(&self.rbuf[at..]) {
            let Some(kind) = kind else {
                return false; // quit
            };
            backend.out.extend_from_slice(&self.rbuf[at..at + len]);
            backend.waiting.push_back((slot, self.generation, kind));
            at += len;
        }
        self.rbuf.drain(..at);
        true
    }
}

impl Backend {
    /// Reads once and hands every complete reply to its client.
    fn on_readable(
        &mut self,
        clients: &mut [Option<Client>],
        dirty: &mut Vec<usize>,
    ) -> io::Result<()> {
        if read_some(self.fd.as_raw_fd(), &mut self.inbuf)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the backend closed the connection",
            ));
        }
        let mut at = 0;
        while let Some(&(slot, generation, kind)) = self.waiting.front() {
            let n = match frame(&self.inbuf[at..], kind, MAX_VALUE) {
                Ok(Frame::Complete(n)) => n,
                Ok(Frame::Incomplete) => break,
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
            };
            self.waiting.pop_front();
            if let Some(c) = clients.get_mut(slot).and_then(Option::as_mut) {
                if c.generation == generation {
                    if c.wbuf.is_empty() {
                        dirty.push(slot);
                    }
                    c.wbuf.extend_from_slice(&self.inbuf[at..at + n]);
                }
            }
            at += n;
        }
        self.inbuf.drain(..at);
        Ok(())
    }
}

/// The length and reply shape of the complete request at the start of `buf` (shape `None`
/// for `quit`), or `None` if it is not all there.
fn request(buf: &[u8]) -> Option<(usize, Option<ReplyKind>)> {
    let nl = buf.iter().position(|&b| b == b'\n')?;
    let line = &buf[..nl];
    if line.starts_with(b"get ") || line.starts_with(b"gets ") {
        return Some((nl + 1, Some(ReplyKind::Retrieval)));
    }
    if line.starts_with(b"quit") {
        return Some((nl + 1, None));
    }
    if line.starts_with(b"set ") {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let bytes: usize = std::str::from_utf8(line.split(|&b| b == b' ').nth(4)?)
            .ok()?
            .parse()
            .ok()?;
        let len = nl + 1 + bytes + 2;
        return (buf.len() >= len).then_some((len, Some(ReplyKind::Line)));
    }
    Some((nl + 1, Some(ReplyKind::Line)))
}

/// One `read` appended to `buf`; returns the byte count (0: closed). EAGAIN counts as 1
/// so that a spurious wakeup does not close anything.
fn read_some(fd: RawFd, buf: &mut Vec<u8>) -> io::Result<usize> {
    buf.reserve(BUFFER);
    let spare = buf.spare_capacity_mut();
    // SAFETY: the pointer and length describe the spare capacity of `buf`, which the
    // kernel may write into; `set_len` below covers only what it wrote.
    let n = unsafe { libc::read(fd, spare.as_mut_ptr().cast(), spare.len()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN | libc::EINTR) => Ok(1),
            _ => Err(e),
        };
    }
    // SAFETY: the kernel initialized the first n bytes of the spare capacity.
    unsafe { buf.set_len(buf.len() + n as usize) };
    Ok(n as usize)
}

/// Sends as much of `buf` as the socket takes, removing it; true when all of it went.
fn send_some(fd: RawFd, buf: &mut Vec<u8>) -> io::Result<bool> {
    let mut sent = 0;
    while sent < buf.len() {
        let rest = &buf[sent..];
        // SAFETY: the pointer and length describe initialized bytes of `buf`.
        let n = unsafe { libc::send(fd, rest.as_ptr().cast(), rest.len(), libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => break,
                _ => return Err(e),
            }
        }
        sent += n as usize;
    }
    buf.drain(..sent);
    Ok(buf.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_framed_as_the_bench_sends_them() {
        assert_eq!(
            request(b"get key:1\r\nget"),
            Some((11, Some(ReplyKind::Retrieval)))
        );
        assert_eq!(request(b"set k 0 0 3\r\nabc"), None);
        assert_eq!(
            request(b"set k 0 0 3\r\nabc\r\nget"),
            Some((18, Some(ReplyKind::Line)))
        );
        assert_eq!(request(b"quit\r\n"), Some((6, None)));
        assert_eq!(request(b"get key:1"), None);
    }
}

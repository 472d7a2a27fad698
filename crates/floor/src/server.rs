//! The "floor" server (`memfleet floor`, what `memfleet bench --spawn floor` starts): a
//! server that only
//! reads and writes its socket. It is NOT a cache and stores nothing. It
//! answers exactly the requests `memfleet bench` sends, correctly, by
//! computing the reply instead of looking anything up:
//!
//! - `get <key>...`: for every key of the form `key:<n>` a `VALUE key:<n> 0
//!   <len>` block carrying [`Workload::value`]`(n)` (what the bench's sets store
//!   under that key, for this run's value size), other keys are misses; then
//!   `END`.
//! - `set <key> <flags> <exptime> <bytes> [noreply]` + data block: the data is
//!   consumed and dropped, the reply is `STORED` (`CLIENT_ERROR bad data chunk`
//!   if the block is not followed by `\r\n`).
//! - `quit` closes the connection; anything else gets `ERROR`.
//!
//! Its CPU time per operation is therefore the cost of the socket I/O alone
//! (epoll, one `read` and one `send` per batch of requests, the kernel's TCP
//! work) plus a trivial parse: the lower bound any memcached-protocol server can
//! reach on this machine with the same I/O pattern, and the yardstick memfleet's
//! server is measured against.
//!
//! Design, chosen to be as cheap as possible: one thread, level-triggered epoll
//! (so one `read` per readable event suffices: a short read means the socket
//! is drained, and anything left is reported again), nonblocking `accept4`, one
//! read buffer and one write buffer per connection reused for its whole life
//! (no allocation per request), all replies of a batch written with one `send`.
//! A connection whose replies cannot all be written stops being read until they
//! are (`EPOLLOUT`), so a client that does not read cannot make it buffer
//! without bound.

use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::epoll::{set_nodelay, Epoll};
use memfleet_loadgen::workload::{parse_key, parse_u64, Workload};

/// Initial read buffer of a connection: a pipelined batch of the bench fits many times.
const READ_BUFFER: usize = 16 * 1024;
/// Longest request line; a longer one closes the connection (memcached: 2048 + key).
const MAX_LINE: usize = 8 * 1024;
/// Largest data block a set may announce; bigger ones are swallowed and refused, like
/// memcached's default item size limit (`-I 1m`).
const MAX_VALUE: usize = 1024 * 1024;
/// Events taken from the kernel per `epoll_wait`.
const EVENTS: usize = 256;
/// The epoll token of the listening socket (connections use their fd).
const LISTENER: u64 = u64::MAX;

/// Serves on 127.0.0.1:`port` until the process is killed, answering gets with values of
/// `value_size` bytes.
pub fn serve(port: u16, value_size: usize) -> io::Result<()> {
    serve_listener(TcpListener::bind(("127.0.0.1", port))?, value_size)
}

/// Serves on an already bound listener until the process is killed (or an epoll call
/// fails), answering gets with values of `value_size` bytes.
pub fn serve_listener(listener: TcpListener, value_size: usize) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let workload = Workload::new(1, 1.0, value_size, None)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let replies = Replies::new(&workload);
    let epoll = Epoll::new()?;
    epoll.add(listener.as_raw_fd(), libc::EPOLLIN as u32, LISTENER)?;
    // Indexed by fd: fds are small integers and the kernel reuses the lowest free one.
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS];
    loop {
        let n = epoll.wait(&mut events)?;
        for ev in &events[..n] {
            let (token, flags) = (ev.u64, ev.events);
            if token == LISTENER {
                accept_all(&listener, &epoll, &mut conns);
                continue;
            }
            let fd = token as usize;
            let Some(conn) = conns.get_mut(fd).and_then(Option::as_mut) else {
                continue;
            };
            let keep = if conn.blocked {
                flags & (libc::EPOLLERR | libc::EPOLLHUP) as u32 == 0
                    && conn.flush(&epoll) != Flow::Close
            } else {
                conn.on_readable(&replies, &epoll) != Flow::Close
            };
            if !keep {
                // Closing the fd also removes it from the epoll set.
                conns[fd] = None;
            }
        }
    }
}

/// Accepts every pending connection.
fn accept_all(listener: &TcpListener, epoll: &Epoll, conns: &mut Vec<Option<Conn>>) {
    loop {
        // SAFETY: accept4 with null address pointers only returns a new fd or -1.
        let fd = unsafe {
            libc::accept4(
                listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) => return,
                Some(libc::EINTR | libc::ECONNABORTED) => continue,
                _ => {
                    // Out of fds or memory: the listener stays readable, so back off
                    // rather than spin on it.
                    eprintln!("floor: accept: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    return;
                }
            }
        }
        // SAFETY: accept4 just returned this fd and nothing else owns it.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        set_nodelay(fd);
        if let Err(e) = epoll.add(fd, libc::EPOLLIN as u32, fd as u64) {
            eprintln!("floor: epoll_ctl add: {e}");
            continue;
        }
        let i = fd as usize;
        if conns.len() <= i {
            conns.resize_with(i + 1, || None);
        }
        conns[i] = Some(Conn::new(owned));
    }
}

/// The fixed parts of every reply, built once.
struct Replies<'a> {
    workload: &'a Workload,
    /// ` 0 <len>\r\n`: the rest of a VALUE line after the key.
    value_line_tail: Vec<u8>,
}

impl<'a> Replies<'a> {
    fn new(workload: &'a Workload) -> Replies<'a> {
        Replies {
            workload,
            value_line_tail: format!(" 0 {}\r\n", workload.value_size()).into_bytes(),
        }
    }
}

/// Whether to keep a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Keep,
    Close,
}

struct Conn {
    fd: OwnedFd,
    /// Received bytes not yet consumed are `rbuf[..rlen]`.
    rbuf: Vec<u8>,
    rlen: usize,
    /// Replies not yet sent are `wbuf[wpos..]`.
    wbuf: Vec<u8>,
    wpos: usize,
    /// Bytes of a refused set's data block still to drop.
    swallow: usize,
    /// Waiting for EPOLLOUT to send the rest of `wbuf` (not reading meanwhile).
    blocked: bool,
    /// Close once `wbuf` is sent (quit, or a request that cannot be followed).
    closing: bool,
}

impl Conn {
    fn new(fd: OwnedFd) -> Conn {
        Conn {
            fd,
            rbuf: vec![0; READ_BUFFER],
            rlen: 0,
            wbuf: Vec::with_capacity(READ_BUFFER),
            wpos: 0,
            swallow: 0,
            blocked: false,
            closing: false,
        }
    }

    /// Reads what the socket holds, answers every complete request, sends the replies.
    fn on_readable(&mut self, r: &Replies, epoll: &Epoll) -> Flow {
        loop {
            if self.rlen == self.rbuf.len() {
                // Only a request bigger than the buffer (a large set) gets here:
                // complete ones were consumed after the previous read.
                let len = self.rbuf.len() * 2;
                self.rbuf.resize(len, 0);
            }
            let space = self.rbuf.len() - self.rlen;
            // SAFETY: the pointer and length describe the unused tail of rbuf, which
            // the kernel may write into.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    self.rbuf[self.rlen..].as_mut_ptr().cast(),
                    space,
                )
            };
            if n == 0 {
                // The peer is done sending; it may still read what is already answered.
                self.closing = true;
                break;
            }
            if n < 0 {
                match io::Error::last_os_error().raw_os_error() {
                    Some(libc::EAGAIN) => break,
                    Some(libc::EINTR) => continue,
                    _ => return Flow::Close,
                }
            }
            let n = n as usize;
            self.rlen += n;
            self.process(r);
            // A short read drained the socket; level-triggered epoll reports anything
            // that arrives later.
            if n < space || self.closing {
                break;
            }
        }
        if self.wbuf.is_empty() {
            return if self.closing {
                Flow::Close
            } else {
                Flow::Keep
            };
        }
        self.flush(epoll)
    }

    /// Sends `wbuf`; if the socket is full, waits for EPOLLOUT without reading.
    fn flush(&mut self, epoll: &Epoll) -> Flow {
        while self.wpos < self.wbuf.len() {
            let rest = &self.wbuf[self.wpos..];
            // SAFETY: the pointer and length describe initialized bytes of wbuf.
            // MSG_NOSIGNAL: a peer that went away gives EPIPE, not SIGPIPE.
            let n = unsafe {
                libc::send(
                    self.fd.as_raw_fd(),
                    rest.as_ptr().cast(),
                    rest.len(),
                    libc::MSG_NOSIGNAL,
                )
            };
            if n < 0 {
                match io::Error::last_os_error().raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => {
                        if !self.blocked {
                            self.blocked = true;
                            let fd = self.fd.as_raw_fd();
                            if epoll.modify(fd, libc::EPOLLOUT as u32, fd as u64).is_err() {
                                return Flow::Close;
                            }
                        }
                        return Flow::Keep;
                    }
                    _ => return Flow::Close,
                }
            }
            self.wpos += n as usize;
        }
        self.wbuf.clear();
        self.wpos = 0;
        if self.closing {
            return Flow::Close;
        }
        if self.blocked {
            self.blocked = false;
            let fd = self.fd.as_raw_fd();
            if epoll.modify(fd, libc::EPOLLIN as u32, fd as u64).is_err() {
                return Flow::Close;
            }
        }
        Flow::Keep
    }

    /// Answers every complete request in `rbuf[..rlen]` into `wbuf` and keeps the
    /// incomplete rest at the start of `rbuf`.
    fn process(&mut self, r: &Replies) {
        let mut pos = 0;
        while !self.closing {
            let buf = &self.rbuf[pos..self.rlen];
            if self.swallow > 0 {
                let k = self.swallow.min(buf.len());
                self.swallow -= k;
                pos += k;
                if self.swallow > 0 {
                    break;
                }
                continue;
            }
            match answer(buf, r, &mut self.wbuf) {
                Step::Incomplete => {
                    if buf.len() > MAX_LINE && !buf[..MAX_LINE].contains(&b'\n') {
                        self.wbuf
                            .extend_from_slice(b"CLIENT_ERROR line too long\r\n");
                        self.closing = true;
                    }
                    break;
                }
                Step::Done(n) => pos += n,
                Step::Swallow(n, data) => {
                    pos += n;
                    self.swallow = data;
                }
                Step::Quit => self.closing = true,
            }
        }
        self.rbuf.copy_within(pos..self.rlen, 0);
        self.rlen -= pos;
    }
}

/// What answering the request at the start of a buffer did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The request is not all there yet.
    Incomplete,
    /// Answered; it took this many bytes.
    Done(usize),
    /// Refused a set: drop its line (first) and then its data block (second).
    Swallow(usize, usize),
    /// `quit`.
    Quit,
}

/// Answers the request at the start of `buf` into `out`.
fn answer(buf: &[u8], r: &Replies, out: &mut Vec<u8>) -> Step {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        return Step::Incomplete;
    };
    let line_len = nl + 1;
    let line = buf[..nl].strip_suffix(b"\r").unwrap_or(&buf[..nl]);
    let mut words = line.split(|&b| b == b' ').filter(|w| !w.is_empty());
    match words.next() {
        Some(b"get") => {
            let mut any = false;
            for key in words {
                any = true;
                if let Some(n) = parse_key(key) {
                    out.extend_from_slice(b"VALUE ");
                    out.extend_from_slice(key);
                    out.extend_from_slice(&r.value_line_tail);
                    out.extend_from_slice(r.workload.value(n));
                    out.extend_from_slice(b"\r\n");
                }
            }
            out.extend_from_slice(if any { b"END\r\n" } else { b"ERROR\r\n" });
            Step::Done(line_len)
        }
        Some(b"set") => {
            let args: [Option<&[u8]>; 5] = std::array::from_fn(|_| words.next());
            let extra = words.next().is_some();
            let (Some(_key), Some(flags), Some(exptime), Some(bytes)) =
                (args[0], args[1], args[2], args[3])
            else {
                out.extend_from_slice(b"ERROR\r\n");
                return Step::Done(line_len);
            };
            let noreply = match args[4] {
                None => false,
                Some(b"noreply") => true,
                Some(_) => {
                    out.extend_from_slice(b"ERROR\r\n");
                    return Step::Done(line_len);
                }
            };
            let numeric = parse_u64(flags).is_some_and(|f| f <= u64::from(u32::MAX))
                && parse_u64(exptime.strip_prefix(b"-").unwrap_or(exptime)).is_some();
            let bytes = parse_u64(bytes).map(|b| b as usize);
            let (true, Some(bytes), false) = (numeric, bytes, extra) else {
                // The data block's length is unknown: it cannot be skipped.
                out.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
                return Step::Done(line_len);
            };
            if bytes > MAX_VALUE {
                out.extend_from_slice(b"SERVER_ERROR object too large for cache\r\n");
                return Step::Swallow(line_len, bytes + 2);
            }
            let end = line_len + bytes + 2;
            if buf.len() < end {
                return Step::Incomplete;
            }
            if &buf[end - 2..end] != b"\r\n" {
                out.extend_from_slice(b"CLIENT_ERROR bad data chunk\r\n");
            } else if !noreply {
                out.extend_from_slice(b"STORED\r\n");
            }
            Step::Done(end)
        }
        Some(b"quit") => Step::Quit,
        _ => {
            out.extend_from_slice(b"ERROR\r\n");
            Step::Done(line_len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(input: &[u8]) -> (Vec<u8>, Vec<Step>) {
        let w = Workload::new(1, 1.0, 10, None).unwrap();
        let r = Replies::new(&w);
        let mut out = Vec::new();
        let mut steps = Vec::new();
        let mut pos = 0;
        loop {
            let s = answer(&input[pos..], &r, &mut out);
            steps.push(s);
            match s {
                Step::Done(n) => pos += n,
                _ => break,
            }
        }
        (out, steps)
    }

    #[test]
    fn gets_return_the_bench_value_of_each_key() {
        let w = Workload::new(1, 1.0, 10, None).unwrap();
        let (out, _) = run(b"get key:3\r\nget key:100 nokey key:0\r\n");
        let expected = [
            b"VALUE key:3 0 10\r\n".as_slice(),
            w.value(3),
            b"\r\nEND\r\nVALUE key:100 0 10\r\n",
            w.value(100),
            b"\r\nVALUE key:0 0 10\r\n",
            w.value(0),
            b"\r\nEND\r\n",
        ]
        .concat();
        assert_eq!(out, expected);
    }

    #[test]
    fn sets_consume_their_data_block() {
        let (out, steps) =
            run(b"set key:1 0 0 3\r\nabc\r\nset k 5 -1 0 noreply\r\n\r\nset x 0 0 2\r\nabcd\r\n");
        assert_eq!(out, b"STORED\r\nCLIENT_ERROR bad data chunk\r\nERROR\r\n");
        assert_eq!(steps[..3], [Step::Done(22), Step::Done(24), Step::Done(17)]);
    }

    #[test]
    fn incomplete_requests_wait() {
        for partial in [
            &b"get key:1"[..],
            b"set a 0 0 5\r\nabc",
            b"set a 0 0 5\r\nabcde\r",
        ] {
            let (out, steps) = run(partial);
            assert_eq!(
                (out.as_slice(), steps.as_slice()),
                (&b""[..], &[Step::Incomplete][..])
            );
        }
    }

    #[test]
    fn other_requests_get_errors() {
        let (out, steps) = run(b"version\r\n\r\nget\r\nset a 0 0\r\nset a x 0 1\r\nquit\r\n");
        assert_eq!(
            out,
            b"ERROR\r\nERROR\r\nERROR\r\nERROR\r\nCLIENT_ERROR bad command line format\r\n"
        );
        assert_eq!(steps.last(), Some(&Step::Quit));
        let (out, steps) = run(b"set a 0 0 2000000\r\n");
        assert_eq!(out, b"SERVER_ERROR object too large for cache\r\n");
        assert_eq!(steps, [Step::Swallow(19, 2_000_002)]);
    }
}

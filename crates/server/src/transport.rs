//! What a connection reads from and writes to: the plain TCP socket, or a TLS session over
//! it. The connection loop (`connection::serve`) is generic over [`Transport`], so each kind
//! gets its own compiled copy: the plaintext one calls the socket directly, exactly as it
//! did before TLS existed, and pays nothing for it.
//!
//! The TLS transport keeps the loop's non-blocking style (try, and wait for readiness only
//! on `WouldBlock`) by driving a `rustls::ServerConnection` over the socket itself, after
//! `tokio_rustls` has done the handshake: ciphertext moves between the socket and rustls
//! with `try_read`/`try_write`, plaintext between rustls and the connection's buffers.
//! rustls holds encrypted output the socket would not take yet ([`Transport::try_flush`]
//! sends it), bounded by its buffer limit.

use memfleet_tls::rustls::ServerConnection;
use std::io::{self, Read, Write};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// A connection's byte stream, in the non-blocking style of `tokio::net::TcpStream`.
pub(crate) trait Transport {
    /// Reads what is available into `buf`'s spare room (reserved by the caller): `Ok(0)` at
    /// the end of the stream, `WouldBlock` when nothing is available.
    fn try_read_buf(&mut self, buf: &mut Vec<u8>) -> io::Result<usize>;

    /// Waits until [`Transport::try_read_buf`] may make progress.
    async fn readable(&self) -> io::Result<()>;

    /// Takes some of `data` for sending: how much, or `WouldBlock`.
    fn try_write(&mut self, data: &[u8]) -> io::Result<usize>;

    /// Sends output taken but not yet on the socket; true when none is left.
    fn try_flush(&mut self) -> io::Result<bool>;

    /// Waits until the socket may take more output.
    async fn writable(&self) -> io::Result<()>;

    /// Ends the stream politely (TLS: a close_notify alert), best effort, never waiting.
    fn close(&mut self);
}

impl Transport for TcpStream {
    #[inline]
    fn try_read_buf(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let room = buf.capacity() - buf.len();
        let n = TcpStream::try_read_buf(self, buf)?;
        if n > 0 && n < room {
            // A short read emptied the socket's receive queue, so the next read would only
            // say WouldBlock: clear the readiness now and save that system call (one in
            // three at pipeline depth 1). Tokio clears it only if no newer readiness event
            // arrived.
            let _ = self.try_io(Interest::READABLE, || {
                Err::<(), _>(io::ErrorKind::WouldBlock.into())
            });
        }
        Ok(n)
    }

    #[inline]
    async fn readable(&self) -> io::Result<()> {
        TcpStream::readable(self).await
    }

    #[inline]
    fn try_write(&mut self, data: &[u8]) -> io::Result<usize> {
        TcpStream::try_write(self, data)
    }

    #[inline]
    fn try_flush(&mut self) -> io::Result<bool> {
        Ok(true)
    }

    #[inline]
    async fn writable(&self) -> io::Result<()> {
        TcpStream::writable(self).await
    }

    fn close(&mut self) {}
}

/// A TLS session, its handshake done, over a non-blocking socket.
pub(crate) struct TlsTransport {
    socket: TcpStream,
    session: ServerConnection,
}

impl TlsTransport {
    /// Takes over a session `tokio_rustls` has completed the handshake of.
    pub(crate) fn new(socket: TcpStream, session: ServerConnection) -> TlsTransport {
        TlsTransport { socket, session }
    }
}

/// `std::io` on a tokio socket without waiting: rustls reads and writes ciphertext through
/// it, and `WouldBlock` comes back out to the connection loop.
struct Socket<'a>(&'a TcpStream);

impl Read for Socket<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

impl Write for Socket<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Transport for TlsTransport {
    fn try_read_buf(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let start = buf.len();
        // rustls reads into initialised memory (zeroed here, at most a few records' worth,
        // however much room a large pending request has reserved).
        buf.resize(buf.capacity().min(start + 64 * 1024), 0);
        let result = loop {
            match self.session.reader().read(&mut buf[start..]) {
                // Ok(0) is a close_notify: the client ended the session.
                Ok(n) => break Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The client closed TCP without close_notify: it left all the same.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break Ok(0),
                Err(e) => break Err(e),
            }
            // No plaintext yet: feed rustls more ciphertext (WouldBlock ends the attempt;
            // Ok(0), the socket's end, makes the reader above report the end).
            if let Err(e) = self.session.read_tls(&mut Socket(&self.socket)) {
                break Err(e);
            }
            if let Err(e) = self.session.process_new_packets() {
                // rustls queued an alert saying why; send it if the socket takes it.
                let _ = self.try_flush();
                break Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            // Records may need answers (a key update): send them now if possible; what
            // does not fit goes with the next reply.
            self.try_flush()?;
        };
        buf.truncate(start + *result.as_ref().unwrap_or(&0));
        result
    }

    async fn readable(&self) -> io::Result<()> {
        // Plaintext rustls already holds was returned by the last try_read_buf, which only
        // said WouldBlock after the socket did: the next progress needs the socket.
        self.socket.readable().await
    }

    fn try_write(&mut self, data: &[u8]) -> io::Result<usize> {
        // Older output first, so rustls's buffer (capped at its 64 KiB default) drains
        // before it takes more: a client that stops reading is not buffered for.
        if !self.try_flush()? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let taken = self.session.writer().write(data)?;
        self.try_flush()?;
        if taken == 0 && !data.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(taken)
    }

    fn try_flush(&mut self) -> io::Result<bool> {
        while self.session.wants_write() {
            match self.session.write_tls(&mut Socket(&self.socket)) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    async fn writable(&self) -> io::Result<()> {
        self.socket.writable().await
    }

    fn close(&mut self) {
        self.session.send_close_notify();
        let _ = self.try_flush();
    }
}

//! A connection to a server that speaks only the binary protocol (memcached `-S`, after the
//! SASL login): the halves the rest of the backend writes text requests to and reads text
//! replies from, translating on the way (`memfleet_protocol::binary::carry`). The writer
//! parses each whole text request it is given, sends its packets and queues the reply it
//! awaits; the reader turns the response packets, in order, into those replies. So the
//! connection task, its framing and the probe work unchanged over them.

use memfleet_protocol::binary::carry::{self, Awaited};
use memfleet_protocol::{parse, ParseError, ParserConfig};
use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The largest value carried (the backend's own limit on replies).
const MAX_VALUE: usize = super::MAX_VALUE;
/// Packets waiting to be written beyond which a write waits for the socket.
const HIGH_WATER: usize = 1 << 20;

type Queue = Arc<Mutex<VecDeque<Awaited>>>;

/// `rd` and `wr`, carried: text in and out, binary on the wire.
pub(super) fn carried(
    rd: Box<dyn AsyncRead + Unpin + Send>,
    wr: Box<dyn AsyncWrite + Unpin + Send>,
) -> (
    Box<dyn AsyncRead + Unpin + Send>,
    Box<dyn AsyncWrite + Unpin + Send>,
) {
    let queue: Queue = Arc::default();
    (
        Box::new(TextReader {
            inner: rd,
            packets: Vec::new(),
            text: Vec::new(),
            at: 0,
            queue: queue.clone(),
        }),
        Box::new(TextWriter {
            inner: wr,
            text: Vec::new(),
            packets: Vec::new(),
            written: 0,
            queue,
            config: ParserConfig::with_max_item_size(MAX_VALUE),
        }),
    )
}

/// Takes text requests, writes their packets.
struct TextWriter {
    inner: Box<dyn AsyncWrite + Unpin + Send>,
    /// Text not yet a whole request.
    text: Vec<u8>,
    /// Packets to write, from `written` on.
    packets: Vec<u8>,
    written: usize,
    queue: Queue,
    config: ParserConfig,
}

impl TextWriter {
    /// Turns every whole request in `text` into packets, queueing the replies awaited.
    fn translate(&mut self) -> io::Result<()> {
        let mut at = 0;
        while at < self.text.len() {
            match parse(&self.text[at..], &self.config) {
                Ok((request, used)) => {
                    let awaited = carry::carry(&request, &mut self.packets);
                    self.queue
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push_back(awaited);
                    at += used;
                }
                Err(ParseError::Incomplete) => break,
                // The backend sends only requests it parsed itself.
                Err(ParseError::Invalid(rejection)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "a request the binary protocol cannot carry: {:?}",
                            rejection.kind
                        ),
                    ))
                }
            }
        }
        self.text.drain(..at);
        Ok(())
    }

    /// Writes the waiting packets until they are all out or the socket is full.
    fn poll_packets(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.packets.len() {
            let n =
                ready!(Pin::new(&mut self.inner).poll_write(cx, &self.packets[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.packets.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for TextWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.packets.len() - this.written > HIGH_WATER {
            ready!(this.poll_packets(cx))?;
        }
        this.text.extend_from_slice(buf);
        this.translate()?;
        // Started now; what the socket does not take goes at the next write or flush.
        if let Poll::Ready(Err(e)) = this.poll_packets(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_packets(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_packets(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// Reads response packets, gives text replies.
struct TextReader {
    inner: Box<dyn AsyncRead + Unpin + Send>,
    /// Packets not yet whole.
    packets: Vec<u8>,
    /// Replies made, from `at` on not yet read.
    text: Vec<u8>,
    at: usize,
    queue: Queue,
}

impl TextReader {
    /// Turns every whole packet into its share of a reply.
    fn translate(&mut self) -> io::Result<()> {
        let mut used = 0;
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let (response, n) = match carry::response(&self.packets[used..], MAX_VALUE + 4096) {
                Ok(Some(found)) => found,
                Ok(None) => break,
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            };
            let Some(awaited) = queue.front_mut() else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a binary response nobody asked for",
                ));
            };
            if let Some(reply) = awaited.take(&response) {
                queue.pop_front();
                self.text.extend_from_slice(&reply);
            }
            used += n;
        }
        self.packets.drain(..used);
        Ok(())
    }
}

impl AsyncRead for TextReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.at < this.text.len() {
                let n = buf.remaining().min(this.text.len() - this.at);
                buf.put_slice(&this.text[this.at..this.at + n]);
                this.at += n;
                if this.at == this.text.len() {
                    this.text.clear();
                    this.at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 16 * 1024];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                // The end of the connection.
                return Poll::Ready(Ok(()));
            }
            this.packets.extend_from_slice(read.filled());
            this.translate()?;
        }
    }
}

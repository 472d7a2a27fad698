//! memcached's UDP framing, without the socket: the 8-byte header every datagram starts
//! with, cutting a reply into datagrams, and putting one back together.
//!
//! ```text
//! 0-1 request id   2-3 sequence number   4-5 datagrams in this message   6-7 reserved (0)
//! ```
//!
//! All big-endian. The server (`memfleet server -U`) reads a request's header with
//! [`Header::parse`] and cuts its reply with [`fragment`]; the client library sends a
//! request with [`Header::request`] and rebuilds the reply with [`Reassembly`]. A datagram
//! comes from anyone on the network, so everything here takes arbitrary bytes: a short
//! datagram has no header, and a reassembly that meets a datagram out of order, a count of
//! zero or a sequence past the count gives up (the reply is *lost*) rather than guess.
//! `fuzz/fuzz_targets/udp.rs` checks it.

/// The frame header's size.
pub const HEADER_LEN: usize = 8;
/// The largest datagram a server sends, header included (memcached's
/// `UDP_MAX_PAYLOAD_SIZE`).
pub const MAX_DATAGRAM: usize = 1400;
/// Payload bytes per datagram.
const PER_DATAGRAM: usize = MAX_DATAGRAM - HEADER_LEN;
/// The largest reply [`fragment`] cuts (a message numbers at most 65,535 datagrams).
pub const MAX_FRAGMENTED: usize = PER_DATAGRAM * u16::MAX as usize;

/// The header of a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Chosen by the client, echoed in every reply datagram.
    pub request_id: u16,
    /// This datagram's position in its message.
    pub sequence: u16,
    /// Datagrams in the message.
    pub count: u16,
}

impl Header {
    /// The header of a one-datagram request (the only kind a server takes).
    pub fn request(request_id: u16) -> Header {
        Header {
            request_id,
            sequence: 0,
            count: 1,
        }
    }

    /// Reads the header of `datagram`, and returns it with the payload after it (`None`
    /// if the datagram is shorter than a header). The reserved bytes are not checked:
    /// memcached ignores them too.
    pub fn parse(datagram: &[u8]) -> Option<(Header, &[u8])> {
        let (h, payload) = datagram.split_first_chunk::<HEADER_LEN>()?;
        let word = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
        let header = Header {
            request_id: word(0),
            sequence: word(2),
            count: word(4),
        };
        Some((header, payload))
    }

    /// Whether this datagram is a whole message by itself (sequence 0 of 1).
    pub fn is_single(&self) -> bool {
        self.sequence == 0 && self.count == 1
    }

    /// Appends this header.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.request_id.to_be_bytes());
        out.extend_from_slice(&self.sequence.to_be_bytes());
        out.extend_from_slice(&self.count.to_be_bytes());
        out.extend_from_slice(&[0, 0]);
    }
}

/// Cuts `reply` into framed datagrams of at most [`MAX_DATAGRAM`] bytes for `request_id`,
/// appended to `out` back to back; returns where each datagram ends. An empty reply is one
/// datagram with just the header. `None` (and nothing appended) if the reply is longer than
/// [`MAX_FRAGMENTED`]: its datagrams could not be numbered.
pub fn fragment(request_id: u16, reply: &[u8], out: &mut Vec<u8>) -> Option<Vec<usize>> {
    if reply.len() > MAX_FRAGMENTED {
        return None;
    }
    let count = reply.len().div_ceil(PER_DATAGRAM).max(1);
    let mut ends = Vec::with_capacity(count);
    let chunks = reply
        .chunks(PER_DATAGRAM)
        .chain(reply.is_empty().then_some(&[][..]));
    for (i, chunk) in chunks.enumerate() {
        Header {
            request_id,
            // Both fit: count ≤ u16::MAX was checked above.
            sequence: i as u16,
            count: count as u16,
        }
        .write(out);
        out.extend_from_slice(chunk);
        ends.push(out.len());
    }
    Some(ends)
}

/// One reply being put back together from its datagrams, which must arrive in order.
#[derive(Debug, Default)]
pub struct Reassembly {
    next: u16,
    payload: Vec<u8>,
}

/// What one datagram did to a [`Reassembly`].
#[derive(Debug, PartialEq, Eq)]
pub enum Progress {
    /// More datagrams to come.
    More,
    /// The last one arrived: the whole payload, in order.
    Whole(Vec<u8>),
    /// Out of order, inconsistent, or over the size limit: the reply cannot be trusted to
    /// be whole (a reordered or dropped datagram looks the same); count it as lost.
    Lost,
}

impl Reassembly {
    /// Adds one datagram's `payload` (its header already parsed); no reply grows past
    /// `max_reply` bytes.
    pub fn add(&mut self, header: Header, payload: &[u8], max_reply: usize) -> Progress {
        if header.sequence != self.next || header.count == 0 || header.sequence >= header.count {
            return Progress::Lost;
        }
        if self.payload.len() + payload.len() > max_reply {
            return Progress::Lost;
        }
        self.payload.extend_from_slice(payload);
        self.next += 1;
        if self.next == header.count {
            Progress::Whole(std::mem::take(&mut self.payload))
        } else {
            Progress::More
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_cut_into_numbered_datagrams_and_rebuilt() {
        let reply: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let mut out = Vec::new();
        let ends = fragment(0xabcd, &reply, &mut out).unwrap();
        assert_eq!(ends.len(), 3);
        let mut start = 0;
        let mut whole = Reassembly::default();
        for (i, end) in ends.iter().enumerate() {
            let d = &out[start..*end];
            assert!(d.len() <= MAX_DATAGRAM);
            let (h, payload) = Header::parse(d).unwrap();
            assert_eq!((h.request_id, h.sequence, h.count), (0xabcd, i as u16, 3));
            match whole.add(h, payload, 1 << 20) {
                Progress::Whole(got) => assert_eq!((i, got), (2, reply.clone())),
                Progress::More => assert!(i < 2),
                Progress::Lost => panic!("datagram {i} lost"),
            }
            start = *end;
        }
        let mut out = Vec::new();
        assert_eq!(fragment(1, b"", &mut out), Some(vec![HEADER_LEN]));
        assert_eq!(out, [0, 1, 0, 0, 0, 1, 0, 0]);
    }

    #[test]
    fn short_or_disordered_datagrams_are_refused() {
        assert_eq!(Header::parse(&[0; 7]), None);
        let (h, rest) = Header::parse(&[0, 9, 0, 0, 0, 1, 0, 0, b'x']).unwrap();
        assert!(h.is_single() && h.request_id == 9 && rest == b"x");
        let header = |sequence, count| Header {
            request_id: 1,
            sequence,
            count,
        };
        assert_eq!(
            Reassembly::default().add(header(1, 2), b"", 10),
            Progress::Lost
        );
        assert_eq!(
            Reassembly::default().add(header(0, 0), b"", 10),
            Progress::Lost
        );
        assert_eq!(
            Reassembly::default().add(header(0, 2), b"x", 0),
            Progress::Lost
        );
    }
}

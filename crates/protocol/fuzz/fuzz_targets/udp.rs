//! Fuzz target for `memfleet_protocol::udp`, memcached's UDP frame header, which the server
//! reads from anyone who can send it a datagram and the client reads from whatever answers:
//! any bytes must parse to a header (or none when short) that writes back to the same
//! bytes; any reply must cut into datagrams that parse and reassemble to exactly it; and any
//! sequence of datagrams fed to a reassembly must end in "more", "whole" (never larger than
//! the limit) or "lost", never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memfleet_protocol::udp::{fragment, Header, Progress, Reassembly, HEADER_LEN, MAX_DATAGRAM};

const LIMIT: usize = 16 << 10;

fuzz_target!(|data: &[u8]| {
    // 1. The header of arbitrary bytes round-trips (the reserved bytes are written as 0).
    match Header::parse(data) {
        None => assert!(data.len() < HEADER_LEN),
        Some((header, payload)) => {
            assert_eq!(payload, &data[HEADER_LEN..]);
            let mut out = Vec::new();
            header.write(&mut out);
            assert_eq!(out[..6], data[..6]);
            assert_eq!(out[6..], [0, 0]);
            assert_eq!(header.is_single(), header.sequence == 0 && header.count == 1);
        }
    }

    // 2. The input as a reply: cut, then rebuilt in order, it is the same bytes.
    let id = data.first().map_or(0, |&b| u16::from(b) << 8 | 0x5a);
    let mut framed = Vec::new();
    let ends = fragment(id, data, &mut framed).expect("fits in a message");
    let mut whole = Reassembly::default();
    let mut start = 0;
    for (i, &end) in ends.iter().enumerate() {
        let datagram = &framed[start..end];
        assert!(datagram.len() <= MAX_DATAGRAM);
        let (header, payload) = Header::parse(datagram).expect("a whole header");
        assert_eq!((header.request_id, header.sequence), (id, i as u16));
        assert_eq!(usize::from(header.count), ends.len());
        match whole.add(header, payload, usize::MAX) {
            Progress::More => assert!(i + 1 < ends.len()),
            Progress::Whole(reply) => {
                assert_eq!(i + 1, ends.len());
                assert_eq!(reply, data);
            }
            Progress::Lost => panic!("datagram {i} of an in-order message lost"),
        }
        start = end;
    }

    // 3. The input as a stream of datagrams (each: one length byte, then that many bytes)
    //    from a hostile server: the reassembly ends somewhere sane.
    let mut reassembly = Reassembly::default();
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let (datagram, tail) = tail.split_at(usize::from(len).min(tail.len()));
        rest = tail;
        let Some((header, payload)) = Header::parse(datagram) else {
            continue;
        };
        match reassembly.add(header, payload, LIMIT) {
            Progress::More => {}
            Progress::Whole(reply) => {
                assert!(reply.len() <= LIMIT);
                reassembly = Reassembly::default();
            }
            Progress::Lost => reassembly = Reassembly::default(),
        }
    }
});

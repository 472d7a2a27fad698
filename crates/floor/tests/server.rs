//! The floor server (`memfleet floor`, `memfleet bench --spawn floor`) through real sockets: the
//! bench's own reply verification passes against it with zero errors, and its
//! replies are byte-exact for pipelined batches, requests split across reads,
//! big data blocks and a client that does not read its replies for a while.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use clap::Parser;
use memfleet_bench::load::{self, workload::Workload, LoadArgs};
use memfleet_floor::server as floor;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: LoadArgs,
}

/// Starts a floor server on a thread (it runs until the test process exits).
fn start_floor(value_size: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || floor::serve_listener(listener, value_size).unwrap());
    addr
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

fn read_exactly(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0; n];
    s.read_exact(&mut buf).unwrap();
    buf
}

fn get_reply(w: &Workload, n: u64) -> Vec<u8> {
    [
        format!("VALUE key:{n} 0 {}\r\n", w.value_size()).as_bytes(),
        w.value(n),
        b"\r\nEND\r\n",
    ]
    .concat()
}

#[test]
fn bench_verifies_the_floor_with_zero_errors() {
    for (value_size, pipeline, duration) in [(100, "1,16", "1s"), (1000, "8", "300ms")] {
        let addr = start_floor(value_size);
        let target = format!("floor=127.0.0.1:{}", addr.port());
        let size = value_size.to_string();
        let args = Cli::parse_from([
            "bench",
            "--target",
            &target,
            "--warmup",
            "200ms",
            "--duration",
            duration,
            "--pipeline",
            pipeline,
            "--conns",
            "8",
            "--keys",
            "10000",
            "--value-size",
            &size,
            "--no-pin",
        ])
        .args;
        let rows = load::bench(&args).unwrap();
        assert_eq!(rows.len(), pipeline.split(',').count());
        for row in &rows {
            assert_eq!(row.errors, 0, "{row:?}");
            assert!(row.ops_per_sec > 0.0, "{row:?}");
            // Every get of the bench's keys is answered with its value.
            assert_eq!(row.hit_ratio, 1.0, "{row:?}");
        }
    }
}

#[test]
fn pipelined_mix_in_one_write_and_split_byte_by_byte() {
    let w = Workload::new(1, 1.0, 100, None).unwrap();
    let addr = start_floor(100);
    let mut requests = Vec::new();
    let mut expected = Vec::new();
    for i in 0..50u64 {
        if i % 10 == 3 {
            w.encode(load::workload::WorkloadOp::Set(i), &mut requests);
            expected.extend_from_slice(b"STORED\r\n");
        } else {
            w.encode(load::workload::WorkloadOp::Get(i * 7919), &mut requests);
            expected.extend(get_reply(&w, i * 7919));
        }
    }
    requests.extend_from_slice(b"set other 1 0 3 noreply\r\nabc\r\nget key:05 other\r\nstats\r\n");
    expected.extend_from_slice(b"END\r\nERROR\r\n");

    let mut s = connect(addr);
    s.write_all(&requests).unwrap();
    assert_eq!(read_exactly(&mut s, expected.len()), expected);

    // The same requests one byte per write: every request spans several reads.
    for b in &requests {
        s.write_all(std::slice::from_ref(b)).unwrap();
    }
    assert_eq!(read_exactly(&mut s, expected.len()), expected);

    s.write_all(b"quit\r\nget key:1\r\n").unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    assert_eq!(rest, b"", "quit closes without answering what follows");
}

#[test]
fn big_and_too_big_data_blocks() {
    let w = Workload::new(1, 1.0, 10, None).unwrap();
    let addr = start_floor(10);
    let mut s = connect(addr);
    // 200 KB: larger than the connection's initial read buffer.
    let mut req = b"set big 0 0 200000\r\n".to_vec();
    req.extend(std::iter::repeat_n(b'x', 200_000));
    req.extend_from_slice(b"\r\nget key:2\r\n");
    // 2 MB: refused, and its data block is dropped rather than parsed as requests.
    req.extend_from_slice(b"set huge 0 0 2000000\r\n");
    req.extend(std::iter::repeat_n(b'g', 2_000_000));
    req.extend_from_slice(b"\r\nget key:3\r\nset k 0 0 2\r\nabcd\r\n");
    let expected = [
        b"STORED\r\n".as_slice(),
        &get_reply(&w, 2),
        b"SERVER_ERROR object too large for cache\r\n",
        &get_reply(&w, 3),
        b"CLIENT_ERROR bad data chunk\r\nERROR\r\n",
    ]
    .concat();
    s.write_all(&req).unwrap();
    assert_eq!(read_exactly(&mut s, expected.len()), expected);
}

#[test]
fn a_client_that_reads_late_gets_every_reply() {
    let w = Workload::new(1, 1.0, 100, None).unwrap();
    let addr = start_floor(100);
    let mut s = connect(addr);
    let mut requests = Vec::new();
    let mut expected = Vec::new();
    for n in 0..100_000u64 {
        w.encode(load::workload::WorkloadOp::Get(n), &mut requests);
        expected.extend(get_reply(&w, n));
    }
    // ~14 MB of replies to 1.5 MB of requests: far more than the socket buffers hold, so
    // the server must wait for the client to read before answering the rest.
    let mut writer = s.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        writer.write_all(&requests).unwrap();
        writer.shutdown(Shutdown::Write).unwrap();
    });
    std::thread::sleep(Duration::from_millis(500));
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    sender.join().unwrap();
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "replies differ");
}

//! Key dumps through a real socket: `stats cachedump`, `lru_crawler metadump` and `mgdump`
//! in memcached 1.6.45's formats (the literals here were checked against that binary; only
//! times, CAS values and `size`, which is memfleet's own item size, differ), their bounds,
//! the other `lru_crawler` subcommands, and a large dump streamed while writes go on.

use crate::common;

use common::{Client, TestServer};
use std::collections::HashMap;
use std::io::Read;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Sends `request` and reads the reply up to `end` (at the start of a line).
fn ask(c: &mut Client, request: &str, end: &str) -> String {
    c.send(request);
    let mut out = String::from_utf8(c.read_until(end.as_bytes())).unwrap();
    while !(out == end || out.ends_with(&format!("\n{end}"))) {
        out.push_str(&String::from_utf8(c.read_until(end.as_bytes())).unwrap());
    }
    out
}

/// The lines of a dump between its header and its trailer, sorted (dumps come in hash order).
fn body(reply: &str, head: &str, tail: &str) -> Vec<String> {
    let inner = reply
        .strip_prefix(head)
        .and_then(|r| r.strip_suffix(tail))
        .unwrap_or_else(|| panic!("not {head:?}...{tail:?}: {reply:?}"));
    let mut lines: Vec<String> = inner.split_inclusive('\n').map(str::to_string).collect();
    lines.sort();
    lines
}

/// `foo` (flags 5, no expiry, fetched once) and `b%r` (an absolute expiry `exp`).
fn two_items(c: &mut Client) -> u64 {
    let exp = unix_now() + 1000;
    c.check("set foo 5 0 3\r\nbar\r\n", "STORED\r\n");
    c.check(
        format!("set b%r 0 {exp} 10\r\n0123456789\r\n"),
        "STORED\r\n",
    );
    c.check("get foo\r\n", "VALUE foo 5 3\r\nbar\r\nEND\r\n");
    exp
}

/// The expiry a dump printed for an item asked to expire at `exp`: the engine may round a
/// deadline down by its TTL bucket's tolerance (a few seconds for 1000 s).
fn check_exp(printed: u64, exp: u64) {
    assert!(
        (exp - 30..=exp + 1).contains(&printed),
        "expiry {printed}, asked {exp}"
    );
}

#[test]
fn cachedump_lists_items_with_length_and_expiry() {
    let s = TestServer::start();
    let mut c = s.connect();
    let exp = two_items(&mut c);
    let reply = ask(&mut c, "stats cachedump 1 0\r\n", "END\r\n");
    let lines = body(&reply, "", "END\r\n");
    assert_eq!(lines.len(), 2, "{reply:?}");
    let printed: u64 = lines[0]
        .strip_prefix("ITEM b%r [10 b; ")
        .and_then(|l| l.strip_suffix(" s]\r\n"))
        .unwrap_or_else(|| panic!("{:?}", lines[0]))
        .parse()
        .unwrap();
    check_exp(printed, exp);
    assert_eq!(lines[1], "ITEM foo [3 b; 0 s]\r\n");
    // A limit, a third argument memcached ignores, other classes, and its errors.
    let one = ask(&mut c, "stats cachedump 1 1 0\r\n", "END\r\n");
    assert_eq!(body(&one, "", "END\r\n").len(), 1, "{one:?}");
    for (request, reply) in [
        ("stats cachedump 2 0\r\n", "END\r\n"),
        ("stats cachedump 63 0\r\n", "END\r\n"),
        (
            "stats cachedump 64 0\r\n",
            "CLIENT_ERROR Illegal slab id\r\n",
        ),
        ("stats cachedump 1\r\n", "CLIENT_ERROR bad command line\r\n"),
        ("stats cachedump\r\n", "CLIENT_ERROR bad command line\r\n"),
        (
            "stats cachedump x 0\r\n",
            "CLIENT_ERROR bad command line format\r\n",
        ),
        (
            "stats cachedump 1 -1\r\n",
            "CLIENT_ERROR bad command line format\r\n",
        ),
        (
            "stats cachedump 1 +1\r\n",
            "CLIENT_ERROR bad command line format\r\n",
        ),
    ] {
        c.check(request, reply);
    }
    // Deleted and expired items are left out.
    c.check("delete foo\r\n", "DELETED\r\n");
    c.check("set gone 0 -1 1\r\nx\r\n", "STORED\r\n");
    let reply = ask(&mut c, "stats cachedump 1 0\r\n", "END\r\n");
    assert!(reply.starts_with("ITEM b%r [10 b; ") && reply.matches("ITEM").count() == 1);
}

#[test]
fn cachedump_stops_at_two_megabytes_as_memcached() {
    let s = TestServer::start();
    let mut c = s.connect();
    // Every line is "ITEM <250-byte key> [1 b; 0 s]\r\n": 268 bytes.
    let n = 9000;
    let mut batch = String::new();
    for i in 0..n {
        batch.push_str(&format!("set {i:0>250} 0 0 1 noreply\r\nx\r\n"));
    }
    c.silent(batch);
    let reply = ask(&mut c, "stats cachedump 1 0\r\n", "END\r\n");
    let line = 268;
    // memcached shows a line only while it and "END\r\n\0" fit in 2 MiB.
    let shown = (2 * 1024 * 1024 - 6) / line;
    assert_eq!(reply.len(), shown * line + 5);
    assert_eq!(reply.matches("ITEM ").count(), shown);
    // A limit below the cap wins.
    let reply = ask(&mut c, "stats cachedump 1 100\r\n", "END\r\n");
    assert_eq!(reply.len(), 100 * line + 5);
}

/// One metadump line's fields, in memcached's order; panics on any other shape.
fn fields(line: &str) -> HashMap<&str, &str> {
    let names = ["key", "exp", "la", "cas", "fetch", "cls", "size", "flags"];
    let text = line
        .strip_suffix(" \n")
        .unwrap_or_else(|| panic!("{line:?}"));
    let pairs: Vec<(&str, &str)> = text
        .split(' ')
        .map(|p| p.split_once('=').unwrap_or_else(|| panic!("{line:?}")))
        .collect();
    let got: Vec<&str> = pairs.iter().map(|p| p.0).collect();
    assert_eq!(got, names, "{line:?}");
    pairs.into_iter().collect()
}

#[test]
fn metadump_lines_match_memcached() {
    let s = TestServer::start();
    let mut c = s.connect();
    let exp = two_items(&mut c);
    c.send("gets foo\r\n");
    let gets = String::from_utf8(c.read_until(b"END\r\n")).unwrap();
    let cas = gets.split_whitespace().nth(4).unwrap().to_string();
    let started = unix_now();
    for class in ["all", "hash", "1", "1,2", "m all"] {
        let request = if class == "m all" {
            "lru_crawler m all\r\n".to_string() // memcached matches subcommands by prefix
        } else {
            format!("lru_crawler metadump {class}\r\n")
        };
        let reply = ask(&mut c, &request, "END\r\n");
        let lines = body(&reply, "OK\r\n", "END\r\n");
        assert_eq!(lines.len(), 2, "{reply:?}");
        let b = fields(&lines[0]);
        assert_eq!(b["key"], "b%25r");
        check_exp(b["exp"].parse().unwrap(), exp);
        assert_eq!((b["fetch"], b["cls"], b["flags"]), ("no", "1", "0"));
        let foo = fields(&lines[1]);
        assert_eq!(foo["key"], "foo");
        assert_eq!(
            (foo["exp"], foo["cas"], foo["fetch"]),
            ("-1", cas.as_str(), "yes")
        );
        assert_eq!((foo["cls"], foo["flags"]), ("1", "5"));
        let la: u64 = foo["la"].parse().unwrap();
        assert!((started - 60..=started + 1).contains(&la), "la={la}");
        assert!(foo["size"].parse::<u64>().unwrap() >= 3 + 3);
    }
    for (request, reply) in [
        ("lru_crawler metadump 2\r\n", "OK\r\nEND\r\n"),
        (
            "lru_crawler metadump 0\r\n",
            "BADCLASS invalid class id\r\n",
        ),
        (
            "lru_crawler metadump 64\r\n",
            "BADCLASS invalid class id\r\n",
        ),
        (
            "lru_crawler metadump x\r\n",
            "BADCLASS invalid class id\r\n",
        ),
        (
            "lru_crawler metadump ,\r\n",
            "NOTSTARTED no items to crawl\r\n",
        ),
        ("lru_crawler metadump\r\n", "ERROR\r\n"),
        ("lru_crawler metadump all x\r\n", "ERROR\r\n"),
    ] {
        c.check(request, reply);
    }
}

#[test]
fn mgdump_prints_mg_lines_and_binary_keys_in_base64() {
    let s = TestServer::start();
    let mut c = s.connect();
    two_items(&mut c);
    // "a b" cannot be a text key: stored through meta's base64.
    c.check("ms YSBi 1 b\r\nx\r\n", "HD\r\n");
    let reply = ask(&mut c, "lru_crawler mgdump all\r\n", "EN\r\n");
    let lines = body(&reply, "OK\r\n", "EN\r\n");
    assert_eq!(lines, ["mg YSBi b\r\n", "mg b%r\r\n", "mg foo\r\n"]);
    let reply = ask(&mut c, "lru_crawler mgdump hash\r\n", "EN\r\n");
    assert_eq!(body(&reply, "OK\r\n", "EN\r\n").len(), 3);
    c.check("lru_crawler mgdump 3\r\n", "OK\r\nEN\r\n");
    // metadump URL-encodes it; cachedump skips it, as memcached skips binary keys.
    let reply = ask(&mut c, "lru_crawler metadump all\r\n", "END\r\n");
    assert!(reply.contains("key=a%20b exp=-1 "), "{reply:?}");
    let reply = ask(&mut c, "stats cachedump 1 0\r\n", "END\r\n");
    assert_eq!(reply.matches("ITEM ").count(), 2, "{reply:?}");
}

#[test]
fn lru_crawler_subcommands_answer_as_memcached() {
    let s = TestServer::start();
    let mut c = s.connect();
    for (request, reply) in [
        ("lru_crawler crawl all\r\n", "OK\r\n"),
        ("lru_crawler crawl 1\r\n", "OK\r\n"),
        ("lru_crawler crawl 5\r\n", "OK\r\n"),
        (
            "lru_crawler crawl hash\r\n",
            "ERROR an unknown error happened\r\n",
        ),
        ("lru_crawler crawl x\r\n", "BADCLASS invalid class id\r\n"),
        ("lru_crawler crawl\r\n", "ERROR\r\n"),
        ("lru_crawler tocrawl 5\r\n", "OK\r\n"),
        (
            "lru_crawler tocrawl x\r\n",
            "CLIENT_ERROR bad command line format\r\n",
        ),
        (
            "lru_crawler tocrawl -1\r\n",
            "CLIENT_ERROR bad command line format\r\n",
        ),
        (
            "lru_crawler tocrawl 4294967296\r\n",
            "CLIENT_ERROR bad command line format\r\n",
        ),
        ("lru_crawler sleep 100\r\n", "OK\r\n"),
        (
            "lru_crawler sleep 2000000\r\n",
            "CLIENT_ERROR sleep must be one second or less\r\n",
        ),
        ("lru_crawler t 5\r\n", "OK\r\n"),
        ("lru_crawler\r\n", "ERROR\r\n"),
        ("lru_crawler foo\r\n", "ERROR\r\n"),
        ("lru_crawler foo bar baz qux\r\n", "ERROR\r\n"),
        // The crawler is on from the start, as memcached's is.
        (
            "lru_crawler enable\r\n",
            "ERROR failed to start lru crawler thread\r\n",
        ),
        ("lru_crawler disable\r\n", "OK\r\n"),
        ("lru_crawler disable\r\n", "OK\r\n"),
        (
            "lru_crawler metadump all\r\n",
            "CLIENT_ERROR lru crawler disabled\r\n",
        ),
        (
            "lru_crawler mgdump all\r\n",
            "CLIENT_ERROR lru crawler disabled\r\n",
        ),
        (
            "lru_crawler crawl all\r\n",
            "CLIENT_ERROR lru crawler disabled\r\n",
        ),
        // cachedump does not need the crawler.
        ("stats cachedump 1 0\r\n", "END\r\n"),
        ("lru_crawler e\r\n", "OK\r\n"),
        ("lru_crawler metadump all\r\n", "OK\r\nEND\r\n"),
    ] {
        c.check(request, reply);
    }
}

#[test]
fn requests_pipelined_around_a_dump_are_answered_in_order() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check("set foo 5 0 3\r\nbar\r\n", "STORED\r\n");
    c.check(
        "get foo\r\nlru_crawler mgdump all\r\nstats cachedump 1 0\r\nget foo\r\n",
        "VALUE foo 5 3\r\nbar\r\nEND\r\nOK\r\nmg foo\r\nEN\r\n\
         ITEM foo [3 b; 0 s]\r\nEND\r\nVALUE foo 5 3\r\nbar\r\nEND\r\n",
    );
}

/// A dump of many items, read slowly by its client, while another connection keeps writing
/// and reading: every item stored before the dump and left alone appears exactly once, the
/// other connection is never held up, and the server answers normally afterwards.
#[test]
fn a_large_dump_streams_while_writes_continue() {
    let s = TestServer::with(|s| s.limits.threads = 1); // one worker: the dump and the writer share it
    let mut c = s.connect();
    let n = 60_000;
    let value = "v".repeat(100);
    let mut batch = String::new();
    for i in 0..n {
        batch.push_str(&format!("set before:{i} 0 0 100 noreply\r\n{value}\r\n"));
    }
    c.silent(batch);

    let mut dumper = s.connect();
    dumper.send("lru_crawler metadump all\r\n");
    let stop = AtomicBool::new(false);
    let writes = AtomicU64::new(0);
    let (reply, slowest, during) = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut w = s.connect();
            let mut slowest = Duration::ZERO;
            let mut i = 0u64;
            while !stop.load(Relaxed) {
                let t = Instant::now();
                w.check(
                    format!("set during:{} 0 0 1\r\nx\r\n", i % 5000),
                    "STORED\r\n",
                );
                w.check(
                    "get before:7\r\n",
                    format!("VALUE before:7 0 100\r\n{value}\r\nEND\r\n"),
                );
                slowest = slowest.max(t.elapsed());
                writes.fetch_add(1, Relaxed);
                i += 1;
            }
            slowest
        });
        // Read slowly at first, so the server meets a full socket buffer mid-dump.
        let mut reply = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        let started = Instant::now();
        while !reply.ends_with(b"END\r\n") {
            if started.elapsed() < Duration::from_millis(500) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let got = dumper.stream.read(&mut buf).expect("dump arrives");
            assert!(got > 0, "closed mid-dump");
            reply.extend_from_slice(&buf[..got]);
        }
        let during = writes.load(Relaxed);
        stop.store(true, Relaxed);
        (reply, writer.join().unwrap(), during)
    });
    let reply = String::from_utf8(reply).unwrap();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for line in reply.strip_prefix("OK\r\n").unwrap().lines() {
        if let Some(key) = line.strip_prefix("key=").and_then(|l| l.split(' ').next()) {
            *seen.entry(key).or_default() += 1;
        }
    }
    for i in 0..n {
        let key = format!("before%3A{i}");
        assert_eq!(seen.get(key.as_str()), Some(&1), "{key}");
    }
    // The dump lasts at least the 500 ms its client dawdles; the other connection on the
    // same worker is served all along.
    assert!(during >= 20, "only {during} writes while the dump ran");
    assert!(
        slowest < Duration::from_secs(2),
        "a request beside the dump waited {slowest:?}"
    );
    dumper.check(
        "get before:1\r\n",
        format!("VALUE before:1 0 100\r\n{value}\r\nEND\r\n"),
    );
}

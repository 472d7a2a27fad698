//! Every text-protocol command through a real socket, with memcached 1.6's exact replies.

use crate::common;

use common::TestServer;
use std::time::Duration;

#[test]
fn set_get_and_flags_round_trip() {
    let s = TestServer::start();
    let mut c = s.connect();
    for flags in [0u32, 1, 255, 256, 65535, 65536, u32::MAX] {
        let key = format!("flags{flags}");
        c.check(format!("set {key} {flags} 0 5\r\nhello\r\n"), "STORED\r\n");
        c.check(
            format!("get {key}\r\n"),
            format!("VALUE {key} {flags} 5\r\nhello\r\nEND\r\n"),
        );
    }
    c.check("get nothing\r\n", "END\r\n");
    c.check("set empty 0 0 0\r\n\r\n", "STORED\r\n");
    c.check("get empty\r\n", "VALUE empty 0 0\r\n\r\nEND\r\n");
    // Binary-safe values.
    c.check(b"set bin 0 0 4\r\n\r\n\0\xff\r\n", "STORED\r\n");
    c.check("get bin\r\n", b"VALUE bin 0 4\r\n\r\n\0\xff\r\nEND\r\n");
}

#[test]
fn flags_are_refused_for_a_minus_sign_only_before_the_numbers_end() {
    let s = TestServer::start();
    let mut c = s.connect();
    // 2^64-1 is negative as a signed long: memcached refuses it when its sign is `-`, but
    // looks no further than the number's end, so a `-` after a tab is ignored (checked
    // against memcached 1.6.45: stored, flags truncated to 32 bits).
    c.check("set tab 18446744073709551615\t- 0 1\r\nv\r\n", "STORED\r\n");
    c.check("get tab\r\n", "VALUE tab 4294967295 1\r\nv\r\nEND\r\n");
    c.check(
        "set neg -1\t- 0 1\r\nv\r\n",
        "CLIENT_ERROR bad command line format\r\n",
    );
}

#[test]
fn multi_get_answers_in_order_with_repeats() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check(
        "set a 1 0 1\r\nA\r\nset b 2 0 2\r\nBB\r\n",
        "STORED\r\nSTORED\r\n",
    );
    c.check(
        "get a missing b a\r\n",
        "VALUE a 1 1\r\nA\r\nVALUE b 2 2\r\nBB\r\nVALUE a 1 1\r\nA\r\nEND\r\n",
    );
}

#[test]
fn add_replace_append_prepend() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check("add k 7 0 1\r\na\r\n", "STORED\r\n");
    c.check("add k 0 0 1\r\nb\r\n", "NOT_STORED\r\n");
    c.check("replace nope 0 0 1\r\nb\r\n", "NOT_STORED\r\n");
    c.check("replace k 9 0 1\r\nc\r\n", "STORED\r\n");
    c.check("append k 0 0 2\r\nde\r\n", "STORED\r\n");
    c.check("prepend k 0 0 2\r\nab\r\n", "STORED\r\n");
    // append/prepend keep the flags of the item they extend.
    c.check("get k\r\n", "VALUE k 9 5\r\nabcde\r\nEND\r\n");
    c.check("append nope 0 0 1\r\nx\r\n", "NOT_STORED\r\n");
    c.check("prepend nope 0 0 1\r\nx\r\n", "NOT_STORED\r\n");
}

#[test]
fn cas_succeeds_once_then_reports_exists() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check("set k 0 0 1\r\na\r\n", "STORED\r\n");
    c.send("gets k\r\n");
    let reply = String::from_utf8(c.read_until(b"END\r\n")).unwrap();
    let cas: u64 = reply
        .lines()
        .next()
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    c.check(format!("cas k 3 0 1 {cas}\r\nb\r\n"), "STORED\r\n");
    c.check(format!("cas k 0 0 1 {cas}\r\nc\r\n"), "EXISTS\r\n");
    c.check("get k\r\n", "VALUE k 3 1\r\nb\r\nEND\r\n");
    c.check("cas missing 0 0 1 1\r\nx\r\n", "NOT_FOUND\r\n");
    c.check("cas k 0 0 1 1 noreply\r\nx\r\n", "");
    let stats = c.stats("");
    let get = |n: &str| stats.iter().find(|(k, _)| k == n).unwrap().1.clone();
    assert_eq!(get("cas_hits"), "1");
    assert!(get("cas_badval").parse::<u64>().unwrap() >= 1);
    assert_eq!(get("cas_misses"), "1");
}

/// The CAS unique of `key` as `gets` shows it.
fn gets_cas(c: &mut common::Client, key: &str) -> u64 {
    c.send(format!("gets {key}\r\n"));
    let reply = String::from_utf8(c.read_until(b"END\r\n")).unwrap();
    let line = reply.lines().next().unwrap().to_string();
    line.rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("{line}"))
}

/// CAS uniques as memcached's (issue 39): the first write's is 1 and each write takes the
/// next, so a client that keeps 32 bits or a signed 64-bit integer can hold them; two keys'
/// differ; a lease token (`mg N`) continues the same sequence.
#[test]
fn cas_uniques_count_from_one_like_memcached() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check("set a 0 0 1\r\na\r\n", "STORED\r\n");
    c.check("set b 0 0 1\r\nb\r\n", "STORED\r\n");
    assert_eq!((gets_cas(&mut c, "a"), gets_cas(&mut c, "b")), (1, 2));
    c.check("set a 0 0 1\r\nA\r\n", "STORED\r\n");
    assert_eq!(gets_cas(&mut c, "a"), 3);
    c.check("mg fresh s c v N30\r\n", "VA 0 s0 c4 W\r\n\r\n");
    c.check("ms fresh 1 C4\r\nx\r\n", "HD\r\n");
    assert_eq!(gets_cas(&mut c, "fresh"), 5);
}

/// With the test-only `--test-cas-start`, uniques past 2^32 reach clients whole and a `cas`
/// with them stores; a stale one does not.
#[test]
fn cas_uniques_past_2_32_round_trip() {
    let start = (1u64 << 32) + 100;
    let s = TestServer::with(|settings| settings.cas_start = start);
    let mut c = s.connect();
    c.check("set k 0 0 1\r\na\r\n", "STORED\r\n");
    let cas = gets_cas(&mut c, "k");
    assert_eq!(cas, start + 1);
    c.check(format!("cas k 0 0 1 {}\r\nb\r\n", cas - 1), "EXISTS\r\n");
    c.check(format!("cas k 0 0 1 {cas}\r\nb\r\n"), "STORED\r\n");
    c.check("mg k c v\r\n", format!("VA 1 c{}\r\nb\r\n", cas + 1));
}

#[test]
fn delete() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check("set k 0 0 1\r\na\r\n", "STORED\r\n");
    c.check("delete k\r\n", "DELETED\r\n");
    c.check("delete k\r\n", "NOT_FOUND\r\n");
    c.check("get k\r\n", "END\r\n");
    c.check("delete k 0\r\n", "NOT_FOUND\r\n");
    // memcached 1.6.45 ignores what follows the key.
    c.check("delete k x y z\r\n", "NOT_FOUND\r\n");
    // memcached ignores a time; memfleet takes it as a hold-off (tests/it/leases.rs).
    c.check("delete k 5\r\n", "NOT_FOUND\r\n");
}

#[test]
fn incr_and_decr_follow_memcached() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check("incr n 1\r\n", "NOT_FOUND\r\n");
    c.check("set n 5 0 2\r\n99\r\n", "STORED\r\n");
    c.check("incr n 1\r\n", "100\r\n");
    c.check("get n\r\n", "VALUE n 5 3\r\n100\r\nEND\r\n");
    // Shrinking in place pads with spaces, as memcached does.
    c.check("decr n 1\r\n", "99\r\n");
    c.check("get n\r\n", "VALUE n 5 3\r\n99 \r\nEND\r\n");
    c.check("decr n 1000\r\n", "0\r\n");
    c.check("set max 0 0 20\r\n18446744073709551615\r\n", "STORED\r\n");
    c.check("incr max 2\r\n", "1\r\n");
    c.check("set text 0 0 3\r\nabc\r\n", "STORED\r\n");
    c.check(
        "incr text 1\r\n",
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
    );
    c.check(
        "incr n abc\r\n",
        "CLIENT_ERROR invalid numeric delta argument\r\n",
    );
    c.silent("incr n 5 noreply\r\n");
    c.check("get n\r\n", "VALUE n 5 3\r\n5  \r\nEND\r\n");
}

#[test]
fn touch_gat_and_expiry() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check("set k 0 0 1\r\na\r\n", "STORED\r\n");
    c.check("touch k 100\r\n", "TOUCHED\r\n");
    c.check("touch nope 100\r\n", "NOT_FOUND\r\n");
    c.check("mg k t v\r\n", "VA 1 t100\r\na\r\n");
    c.check("gat 0 k\r\n", "VALUE k 0 1\r\na\r\nEND\r\n");
    c.check("mg k t\r\n", "HD t-1\r\n");
    c.send("gats 50 k nope\r\n");
    let reply = String::from_utf8(c.read_until(b"END\r\n")).unwrap();
    assert!(
        reply.starts_with("VALUE k 0 1 ") && reply.ends_with("\r\na\r\nEND\r\n"),
        "{reply}"
    );
    // A negative exptime stores nothing; a past Unix time likewise.
    c.check("set gone 0 -1 1\r\na\r\n", "STORED\r\n");
    c.check("get gone\r\n", "END\r\n");
    c.check("set old 0 1000000000 1\r\na\r\n", "STORED\r\n");
    c.check("get old\r\n", "END\r\n");
    // gat with a negative time returns the value one last time.
    c.check("gat -1 k\r\n", "VALUE k 0 1\r\na\r\nEND\r\n");
    c.check("get k\r\n", "END\r\n");
    // A one-second item is gone after two.
    c.check("set short 0 1 1\r\na\r\n", "STORED\r\n");
    std::thread::sleep(Duration::from_millis(2100));
    c.check("get short\r\n", "END\r\n");
}

#[test]
fn flush_all_now_and_later() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check(
        "set a 0 0 1\r\na\r\nset b 0 0 1\r\nb\r\n",
        "STORED\r\nSTORED\r\n",
    );
    c.check("flush_all\r\n", "OK\r\n");
    c.check("get a b\r\n", "END\r\n");
    c.check("set a 0 0 1\r\na\r\n", "STORED\r\n");
    c.check("get a\r\n", "VALUE a 0 1\r\na\r\nEND\r\n");
    c.check("flush_all 1\r\n", "OK\r\n");
    c.check("get a\r\n", "VALUE a 0 1\r\na\r\nEND\r\n");
    std::thread::sleep(Duration::from_millis(2100));
    c.check("get a\r\n", "END\r\n");
    c.silent("flush_all noreply\r\n");
}

#[test]
fn small_commands_and_errors() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.send("version\r\n");
    let v = String::from_utf8(c.read_until(b"\r\n")).unwrap();
    assert!(v.starts_with("VERSION 1.6.45-memfleet-"), "{v}");
    c.check("verbosity 1\r\n", "OK\r\n");
    c.check("bogus\r\n", "ERROR\r\n");
    c.check("GET a\r\n", "ERROR\r\n");
    c.check("shutdown\r\n", "SERVER_ERROR: shutdown not enabled\r\n");
    c.check(
        "set k 0 0 nan\r\n",
        "CLIENT_ERROR bad command line format\r\n",
    );
    // The rest of the line ("c") is then read as a command: under two bytes, a format
    // error in memcached 1.6.45.
    c.check(
        "set k 0 0 1\r\nabc\r\n",
        "CLIENT_ERROR bad data chunk\r\nCLIENT_ERROR bad command line format\r\n",
    );
    let long_key = "k".repeat(251);
    // memcached 1.6.45 ends this error line twice.
    c.check(
        format!("get {long_key}\r\n"),
        "CLIENT_ERROR bad command line format\r\n\r\n",
    );
    c.check(
        "touch k abc\r\n",
        "CLIENT_ERROR invalid exptime argument\r\n",
    );
    // The connection survived all of that.
    c.check("set k 0 0 1\r\nz\r\n", "STORED\r\n");
    c.send("quit\r\n");
    assert!(c.is_closed());
}

#[test]
fn noreply_suppresses_every_storage_reply() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.silent(
        "set a 0 0 1 noreply\r\n1\r\nadd a 0 0 1 noreply\r\n2\r\nreplace a 0 0 1 noreply\r\n3\r\n\
         append a 0 0 1 noreply\r\n4\r\nprepend a 0 0 1 noreply\r\n5\r\nincr nope 1 noreply\r\n\
         delete nope noreply\r\ntouch a 10 noreply\r\nverbosity 1 noreply\r\n",
    );
    c.check("get a\r\n", "VALUE a 0 3\r\n534\r\nEND\r\n");
}

#[test]
fn largest_item_fits_and_larger_is_refused_without_losing_the_connection() {
    let s = TestServer::start();
    let mut c = s.connect();
    let max = vec![b'x'; 1_048_516];
    let mut req = b"set m 0 0 1048516\r\n".to_vec();
    req.extend_from_slice(&max);
    req.extend_from_slice(b"\r\n");
    c.check(&req, "STORED\r\n");
    c.send("get m\r\n");
    let reply = c.read_until(b"END\r\n");
    assert_eq!(
        reply.len(),
        "VALUE m 0 1048516\r\n".len() + max.len() + 2 + 5
    );
    let mut too_big = b"set m2 0 0 1048517\r\n".to_vec();
    too_big.extend_from_slice(&vec![b'y'; 1_048_517]);
    too_big.extend_from_slice(b"\r\n");
    c.check(&too_big, "SERVER_ERROR object too large for cache\r\n");
    c.check("get m2\r\n", "END\r\n");
    c.check("set after 0 0 2\r\nok\r\n", "STORED\r\n");
}

#[test]
fn over_long_line_closes_the_connection() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.send(format!("set {}", "k".repeat(3000)));
    assert!(c.is_closed());
    let mut c = s.connect();
    c.send("GET / HTTP/1.1\r\n");
    assert!(c.is_closed());
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let s = TestServer::start();
    let mut c = s.connect();
    let mut req = String::new();
    let mut expected = String::new();
    for i in 0..500 {
        req.push_str(&format!(
            "set key{i} {i} 0 {}\r\n{i}\r\n",
            i.to_string().len()
        ));
        expected.push_str("STORED\r\n");
    }
    for i in 0..500 {
        req.push_str(&format!("get key{i}\r\n"));
        expected.push_str(&format!(
            "VALUE key{i} {i} {}\r\n{i}\r\nEND\r\n",
            i.to_string().len()
        ));
    }
    c.check(req, expected);
}

#[test]
fn huge_multi_get_streams_without_losing_values() {
    let s = TestServer::start();
    let mut c = s.connect();
    let value = vec![b'v'; 200_000];
    for i in 0..10 {
        let mut req = format!("set big{i} {i} 0 {}\r\n", value.len()).into_bytes();
        req.extend_from_slice(&value);
        req.extend_from_slice(b"\r\n");
        c.check(&req, "STORED\r\n");
    }
    // 40 values of 200 KB: far more than the server's output budget per write.
    let keys: Vec<String> = (0..40).map(|i| format!("big{}", i % 10)).collect();
    c.send(format!("get {}\r\n", keys.join(" ")));
    let mut expected = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        expected.extend_from_slice(format!("VALUE {k} {} {}\r\n", i % 10, value.len()).as_bytes());
        expected.extend_from_slice(&value);
        expected.extend_from_slice(b"\r\n");
    }
    expected.extend_from_slice(b"END\r\n");
    let got = c.read_n(expected.len());
    assert!(got == expected, "multi-get reply differs");
    c.check("get big0 nope\r\n", {
        let mut e = format!("VALUE big0 0 {}\r\n", value.len()).into_bytes();
        e.extend_from_slice(&value);
        e.extend_from_slice(b"\r\nEND\r\n");
        e
    });
}

#[test]
fn requests_split_across_many_writes() {
    let s = TestServer::start();
    let mut c = s.connect();
    let req = b"set split 3 0 10\r\n0123456789\r\nget split\r\n";
    for b in req.chunks(1) {
        c.send(b);
        std::thread::sleep(Duration::from_micros(200));
    }
    c.check("", "STORED\r\nVALUE split 3 10\r\n0123456789\r\nEND\r\n");
}

#[test]
fn general_stats_use_memcached_names() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check(
        "set a 0 0 1\r\na\r\nget a\r\nget b\r\n",
        "STORED\r\nVALUE a 0 1\r\na\r\nEND\r\nEND\r\n",
    );
    let stats = c.stats("");
    let names: Vec<&str> = stats.iter().map(|(k, _)| k.as_str()).collect();
    for required in [
        "pid",
        "uptime",
        "time",
        "version",
        "rusage_user",
        "rusage_system",
        "max_connections",
        "curr_connections",
        "total_connections",
        "cmd_get",
        "cmd_set",
        "get_hits",
        "get_misses",
        "curr_items",
        "bytes",
        "evictions",
        "expired_unfetched",
        "evicted_unfetched",
        "limit_maxbytes",
        "threads",
        "bytes_read",
        "bytes_written",
        "total_items",
    ] {
        assert!(names.contains(&required), "missing stat {required}");
    }
    let get = |n: &str| {
        stats
            .iter()
            .find(|(k, _)| k == n)
            .unwrap()
            .1
            .parse::<u64>()
            .unwrap()
    };
    assert_eq!(
        (get("cmd_get"), get("get_hits"), get("get_misses")),
        (2, 1, 1)
    );
    assert_eq!((get("cmd_set"), get("curr_items")), (1, 1));
    assert_eq!(get("limit_maxbytes"), 64 << 20);
    assert_eq!(get("threads"), 2);
    assert_eq!(get("curr_connections"), 1);
    c.check("stats reset\r\n", "RESET\r\n");
    assert_eq!(c.stat("cmd_get"), 0);
    let settings = c.stats("settings");
    assert!(settings.contains(&("item_size_max".into(), "1048576".into())));
    c.check("stats nonsense\r\n", "ERROR\r\n");
}

/// Short TTLs live as long as in memcached (whose clock also ticks in whole seconds): an
/// item set with TTL 2 is still there 0.9 s later, whenever in the second it was set. (TTL
/// buckets once let such items go up to a second earlier still.)
#[test]
fn short_ttls_are_not_cut_short() {
    let s = TestServer::start();
    let mut c = s.connect();
    for round in 0..4 {
        let key = format!("short{round}");
        c.check(format!("set {key} 0 2 1\r\na\r\n"), "STORED\r\n");
        std::thread::sleep(Duration::from_millis(900));
        c.check(
            format!("get {key}\r\n"),
            format!("VALUE {key} 0 1\r\na\r\nEND\r\n"),
        );
        // Start the next round at another point within the second.
        std::thread::sleep(Duration::from_millis(330));
    }
}

/// AWS ElastiCache's auto discovery with `--cluster-config FILE`: `config get cluster` in
/// ElastiCache's framing, the version growing when the file changes; other `config` forms,
/// and any `config` without the flag, are memcached's `ERROR`.
#[test]
fn config_get_cluster_answers_the_nodes_file_and_follows_it() {
    let plain = TestServer::start();
    plain.connect().check("config get cluster\r\n", "ERROR\r\n");
    let path = std::env::temp_dir().join(format!("memfleet-nodes-{}", std::process::id()));
    std::fs::write(&path, "# the fleet\na.example|10.0.0.1|11211 # first\n").unwrap();
    let file = path.clone();
    let s = TestServer::with(move |settings| settings.listen.cluster_config = Some(file));
    let mut c = s.connect();
    let ask = |c: &mut common::Client| {
        c.send("config get cluster\r\n");
        let reply = String::from_utf8(c.read_until(b"END\r\n")).unwrap();
        let (head, rest) = reply.split_once("\r\n").unwrap();
        let len: usize = head
            .strip_prefix("CONFIG cluster 0 ")
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(&rest[len..], "\r\nEND\r\n", "{reply:?}");
        let (version, nodes) = rest[..len].trim_end_matches('\n').split_once('\n').unwrap();
        (version.parse::<u64>().unwrap(), nodes.to_string())
    };
    let (v1, nodes) = ask(&mut c);
    assert_eq!(nodes, "a.example|10.0.0.1|11211");
    assert_eq!(ask(&mut c).0, v1, "no change, same version");
    c.check("config get foo\r\n", "ERROR\r\n");
    // A second node (a longer file, so the change shows within one clock tick).
    std::fs::write(
        &path,
        "a.example|10.0.0.1|11211\nb.example|10.0.0.2|11211\n",
    )
    .unwrap();
    let (v2, nodes) = ask(&mut c);
    assert_eq!(nodes, "a.example|10.0.0.1|11211 b.example|10.0.0.2|11211");
    assert!(v2 > v1, "{v2} after {v1}");
    // A file that stops parsing keeps the last good list.
    std::fs::write(&path, "not an entry at all\n").unwrap();
    assert_eq!(ask(&mut c), (v2, nodes));
    std::fs::remove_file(&path).unwrap();
}

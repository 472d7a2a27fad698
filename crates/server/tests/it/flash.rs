//! The flash tier through a socket (`--flash`): items eviction pushed to flash come back
//! byte for byte for every command, pipelined replies stay in order, deletes and
//! overwrites drop the flash copy, and `stats` shows memcached's extstore names.

use crate::common;

use common::{Client, TestServer};
use memfleet_server::config::FlashIo;
use memfleet_storage::FlashFetch;
use std::path::PathBuf;

struct FlashFile(PathBuf);

impl Drop for FlashFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn flash_file(name: &str) -> FlashFile {
    // /var/tmp is a disk (O_DIRECT); the temporary directory may be tmpfs.
    let dir = ["/var/tmp", "/tmp"]
        .iter()
        .map(PathBuf::from)
        .find(|d| d.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    FlashFile(dir.join(format!("memfleet-flash-{}-{name}", std::process::id())))
}

fn server(file: &FlashFile) -> TestServer {
    let spec = memfleet_flash::FlashSpec::parse(&format!("{}:64m", file.0.display())).unwrap();
    TestServer::with(move |s| {
        s.limits.memory_bytes = 8 << 20;
        s.flash.files = vec![spec];
        s.flash.threads = 2;
    })
}

fn value(i: usize) -> String {
    format!("{i:06}-").repeat(140)
}

const N: usize = 24_000; // about 23 MiB of values through an 8 MiB heap

fn fill(c: &mut Client) {
    for i in 0..N {
        let v = value(i);
        c.send(format!("set key:{i} {i} 0 {}\r\n{v}\r\n", v.len()));
    }
    for _ in 0..N {
        assert_eq!(c.read_line(), "STORED\r\n");
    }
}

fn get(c: &mut Client, key: &str) -> Option<(u32, String)> {
    c.send(format!("get {key}\r\n"));
    get_reply(c)
}

/// The reply to a `get` of one key sent before: flags and value, or `None` for a miss.
fn get_reply(c: &mut Client) -> Option<(u32, String)> {
    let line = c.read_line();
    if line == "END\r\n" {
        return None;
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[0], "VALUE", "{line}");
    let len: usize = words[3].parse().unwrap();
    let data = c.read_n(len + 2);
    assert_eq!(c.read_line(), "END\r\n");
    Some((
        words[2].parse().unwrap(),
        String::from_utf8(data[..len].to_vec()).unwrap(),
    ))
}

/// Whether a reply has begun to arrive (without waiting for one).
fn has_data(c: &mut Client) -> bool {
    c.stream.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let arrived = c.stream.peek(&mut byte).is_ok_and(|n| n > 0);
    c.stream.set_nonblocking(false).unwrap();
    arrived
}

#[test]
fn items_on_flash_are_served_exactly_and_counted_under_extstore_names() {
    let file = flash_file("serve");
    let s = server(&file);
    let mut c = s.connect();
    fill(&mut c);
    assert!(c.stat("extstore_objects_written") > 10_000);
    assert!(c.stat("flash_demoted_items") > 10_000);
    let mut missing = 0;
    for i in (0..N).step_by(7) {
        match get(&mut c, &format!("key:{i}")) {
            Some((flags, v)) => {
                assert_eq!(flags, i as u32);
                assert_eq!(v, value(i), "key:{i}");
            }
            None => missing += 1,
        }
    }
    let stats = c.stats("");
    let stat = |n: &str| -> u64 {
        stats
            .iter()
            .find(|(k, _)| k == n)
            .map_or(0, |(_, v)| v.parse().unwrap_or(0))
    };
    assert!(stat("get_extstore") > 1000, "{stats:?}");
    // Each key was read once: served from flash, none moved back into RAM.
    assert_eq!(stat("recache_from_extstore"), 0, "{stats:?}");
    assert_eq!(stat("badcrc_from_extstore"), 0);
    // A key is lost only when eviction dropped it rather than demote it, or a write of
    // another key with the same chain and tag dropped its flash copy (both counted).
    let counted = stat("evictions") + stat("flash_purged") + stat("flash_tag_conflict_drops");
    assert!(missing as u64 <= counted, "{missing} missing: {stats:?}");
    // Fewer than 1% of the keys read, besides those a lagging device cost (a loaded machine:
    // sets never wait for flash, so what the writer could not take was evicted, counted).
    let lagged = stat("flash_write_lag_drops") as usize;
    assert!(
        missing < N / 7 / 100 + lagged / 7 * 2,
        "{missing} missing, {lagged} dropped for a lagging device: {stats:?}"
    );
    for name in [
        "extstore_pages_used",
        "extstore_bytes_written",
        "extstore_objects_read",
        "miss_from_extstore",
        "get_aborted_extstore",
        "flash_write_amplification",
    ] {
        assert!(stats.iter().any(|(k, _)| k == name), "{name} missing");
    }
}

/// Keys eviction moved to flash, found without reading them.
fn flash_keys(c: &mut Client, s: &TestServer, n: usize) -> Vec<usize> {
    let cache = s.server().cache();
    let h = cache.handle();
    let keys: Vec<usize> = (0..N)
        .filter(|i| h.flash_candidate(format!("key:{i}").as_bytes()).is_some())
        .take(n)
        .collect();
    assert_eq!(keys.len(), n);
    let _ = c;
    keys
}

#[test]
fn every_command_works_on_a_flash_item_and_pipelined_replies_stay_in_order() {
    let file = flash_file("commands");
    let s = server(&file);
    let mut c = s.connect();
    fill(&mut c);
    let k = flash_keys(&mut c, &s, 8);
    // A pipelined batch mixing flash and RAM keys: replies in request order.
    let mut batch = String::new();
    for &i in &k[..4] {
        batch.push_str(&format!("get key:{i}\r\nget key:{}\r\n", N - 1 - i));
    }
    c.send(&batch);
    for &i in &k[..4] {
        for j in [i, N - 1 - i] {
            let v = value(j);
            let head = c.read_line();
            assert_eq!(head, format!("VALUE key:{j} {j} {}\r\n", v.len()));
            assert_eq!(c.read_n(v.len() + 2), format!("{v}\r\n").into_bytes());
            assert_eq!(c.read_line(), "END\r\n");
        }
    }
    // A second read of a flash item moves it into RAM.
    let recached = c.stat("recache_from_extstore");
    assert_eq!(
        get(&mut c, &format!("key:{}", k[0])).unwrap().1,
        value(k[0])
    );
    assert_eq!(c.stat("recache_from_extstore"), recached + 1);
    let cache = s.server().cache();
    assert!(cache
        .handle()
        .flash_candidate(format!("key:{}", k[0]).as_bytes())
        .is_none());
    // gets + cas
    let i = k[4];
    c.send(format!("gets key:{i}\r\n"));
    let head = c.read_line();
    let cas: u64 = head.split_whitespace().nth(4).unwrap().parse().unwrap();
    c.read_n(value(i).len() + 2);
    assert_eq!(c.read_line(), "END\r\n");
    c.check(format!("cas key:{i} 1 0 3 {cas}\r\nnew\r\n"), "STORED\r\n");
    assert_eq!(get(&mut c, &format!("key:{i}")), Some((1, "new".into())));
    // touch, append, mg with its flags
    let i = k[5];
    c.check(format!("touch key:{i} 1000\r\n"), "TOUCHED\r\n");
    let i = k[6];
    c.check(format!("append key:{i} 0 0 1\r\n!\r\n"), "STORED\r\n");
    assert_eq!(get(&mut c, &format!("key:{i}")).unwrap().1, value(i) + "!");
    let i = k[7];
    c.send(format!("mg key:{i} s f v\r\n"));
    assert_eq!(
        c.read_line(),
        format!("VA {} s{} f{i}\r\n", value(i).len(), value(i).len())
    );
    c.read_n(value(i).len() + 2);
    // delete and overwrite need no flash read
    let more = flash_keys(&mut c, &s, 12);
    let reads = c.stat("extstore_objects_read");
    c.check(format!("delete key:{}\r\n", more[10]), "DELETED\r\n");
    c.check(
        format!("set key:{} 0 0 2\r\nhi\r\n", more[11]),
        "STORED\r\n",
    );
    assert_eq!(c.stat("extstore_objects_read"), reads, "no flash read");
    assert_eq!(get(&mut c, &format!("key:{}", more[10])), None);
    assert_eq!(
        get(&mut c, &format!("key:{}", more[11])),
        Some((0, "hi".into()))
    );
}

#[test]
fn a_binary_get_of_a_flash_item_finds_it() {
    let file = flash_file("binary");
    let s = server(&file);
    let mut c = s.connect();
    fill(&mut c);
    let k = flash_keys(&mut c, &s, 1)[0];
    let key = format!("key:{k}");
    let mut b = s.connect();
    let mut req = vec![0x80, 0x00];
    req.extend_from_slice(&(key.len() as u16).to_be_bytes());
    req.extend_from_slice(&[0, 0, 0, 0]);
    req.extend_from_slice(&(key.len() as u32).to_be_bytes());
    req.extend_from_slice(&[0; 12]);
    req.extend_from_slice(key.as_bytes());
    b.send(&req);
    let head = b.read_n(24);
    assert_eq!((head[0], head[6], head[7]), (0x81, 0, 0), "status OK");
    let body = u32::from_be_bytes(head[8..12].try_into().unwrap()) as usize;
    let body = b.read_n(body);
    assert_eq!(u32::from_be_bytes(body[..4].try_into().unwrap()), k as u32);
    assert_eq!(&body[4..], value(k).as_bytes());
}

#[test]
fn flash_items_survive_a_graceful_restart_with_a_memory_file() {
    let file = flash_file("restart");
    let memory = flash_file("restart-memory");
    let start = || {
        let spec = memfleet_flash::FlashSpec::parse(&format!("{}:64m", file.0.display())).unwrap();
        let path = memory.0.clone();
        TestServer::with(move |s| {
            s.limits.memory_bytes = 8 << 20;
            s.flash.files = vec![spec];
            s.flash.threads = 2;
            s.memory_file = Some(path);
        })
    };
    let s = start();
    let mut c = s.connect();
    fill(&mut c);
    let k = flash_keys(&mut c, &s, 20);
    drop(c);
    s.stop();
    let s = start();
    let mut c = s.connect();
    assert!(c.stat("extstore_objects_used") > 10_000);
    for &i in &k {
        assert_eq!(
            get(&mut c, &format!("key:{i}")),
            Some((i as u32, value(i))),
            "key:{i}"
        );
    }
    assert!(c.stat("get_extstore") >= k.len() as u64);
    drop(c);
    s.stop();
    let _ = std::fs::remove_file(memfleet_server::warm::meta_path(&memory.0));
}

#[test]
fn a_flash_file_removed_underneath_keeps_serving_from_the_open_file() {
    let file = flash_file("removed");
    let s = server(&file);
    let mut c = s.connect();
    fill(&mut c);
    let k = flash_keys(&mut c, &s, 30);
    // Another process removes the file. The server's descriptor keeps the data (as
    // memcached's extstore's does) until it stops; nothing is lost or wrong meanwhile.
    std::fs::remove_file(&file.0).unwrap();
    for &i in &k {
        assert_eq!(
            get(&mut c, &format!("key:{i}")),
            Some((i as u32, value(i))),
            "key:{i}"
        );
    }
    // Flash writes go on too: another round of items through RAM, read back.
    for i in 0..N / 2 {
        let v = value(i + N);
        c.send(format!("set more:{i} 0 0 {}\r\n{v}\r\n", v.len()));
    }
    for _ in 0..N / 2 {
        assert_eq!(c.read_line(), "STORED\r\n");
    }
    assert_eq!(c.stat("flash_write_errors"), 0);
    let found = (0..N / 2)
        .step_by(50)
        .filter(|i| {
            get(&mut c, &format!("more:{i}")).is_some_and(|(_, v)| {
                assert_eq!(v, value(i + N), "more:{i}");
                true
            })
        })
        .count();
    assert!(found > N / 2 / 50 * 9 / 10, "{found} found");
}

#[test]
fn a_flash_file_truncated_underneath_costs_misses_not_wrong_bytes_or_the_server() {
    let file = flash_file("truncated");
    let s = server(&file);
    let mut c = s.connect();
    fill(&mut c);
    let k = flash_keys(&mut c, &s, 50);
    // Another process cuts the file: what was written is gone.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file.0)
        .unwrap()
        .set_len(0)
        .unwrap();
    let mut served = 0;
    for &i in &k {
        if let Some((flags, v)) = get(&mut c, &format!("key:{i}")) {
            // Only a copy still in a write buffer can be served, and then exactly.
            assert_eq!((flags, v), (i as u32, value(i)));
            served += 1;
        }
    }
    assert!(served < k.len(), "the reads failed");
    let failed = c.stat("get_aborted_extstore") + c.stat("badcrc_from_extstore");
    assert!(failed > 0, "the failed reads are counted");
    // RAM items are untouched and the server goes on storing and serving.
    let newest = N - 1;
    assert_eq!(
        get(&mut c, &format!("key:{newest}")),
        Some((newest as u32, value(newest)))
    );
    c.check("set after 0 0 2\r\nok\r\n", "STORED\r\n");
    assert_eq!(get(&mut c, "after"), Some((0, "ok".into())));
}

/// `n` keys whose flash copies are written out (not still in a write buffer, which is read
/// without the device), once the slow writer has written them.
fn keys_on_the_device(s: &TestServer, n: usize) -> Vec<usize> {
    let cache = s.server().cache();
    let h = cache.handle();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let found: Vec<usize> = (0..N)
            .filter(|i| {
                h.flash_candidate(format!("key:{i}").as_bytes())
                    .is_some_and(|c| matches!(h.flash_fetch(&c), FlashFetch::Device { .. }))
            })
            .take(n)
            .collect();
        if found.len() == n {
            return found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no flash segment written"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn slow_server(file: &FlashFile, delay_ms: u64) -> TestServer {
    let spec = memfleet_flash::FlashSpec::parse(&format!("{}:64m", file.0.display())).unwrap();
    // One worker: the connection waiting for flash and the other share it.
    TestServer::with(move |s| {
        s.limits.memory_bytes = 8 << 20;
        s.limits.threads = 1;
        s.flash.files = vec![spec];
        s.flash.threads = 2;
        s.flash.test_delay = Some(std::time::Duration::from_millis(delay_ms));
    })
}

#[test]
fn pipelined_gets_of_flash_items_read_the_device_together_and_reply_in_order() {
    let file = flash_file("pipelined");
    let s = slow_server(&file, 300);
    let mut c = s.connect();
    fill(&mut c);
    let keys = keys_on_the_device(&s, 6);
    let started = std::time::Instant::now();
    let batch: String = keys.iter().map(|i| format!("get key:{i}\r\n")).collect();
    c.send(batch);
    for &i in &keys {
        assert_eq!(get_reply(&mut c), Some((i as u32, value(i))), "key:{i}");
    }
    // One after another, the six reads would take 1.8 s: the five behind the first are read
    // while it waits.
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_millis(1200),
        "{took:?}: pipelined flash reads went one at a time"
    );
}

#[test]
fn a_slow_flash_read_does_not_hold_up_the_worker_or_other_connections() {
    let file = flash_file("slow");
    let s = slow_server(&file, 500);
    let mut c = s.connect();
    fill(&mut c);
    let k = keys_on_the_device(&s, 1)[0];
    let mut slow = s.connect();
    slow.send(format!("get key:{k}\r\n"));
    // Meanwhile another connection's RAM get, set and get are answered at once.
    let newest = N - 1;
    assert_eq!(
        get(&mut c, &format!("key:{newest}")),
        Some((newest as u32, value(newest)))
    );
    c.check("set fresh 0 0 2\r\nok\r\n", "STORED\r\n");
    assert_eq!(get(&mut c, "fresh"), Some((0, "ok".into())));
    // ... while the flash read has not come back yet.
    assert!(!has_data(&mut slow), "the flash read takes its 500 ms");
    assert_eq!(get_reply(&mut slow), Some((k as u32, value(k))));
}

/// The lines of a dump before its end line (metadump's end with `\n` alone).
fn dump_lines(c: &mut Client, command: &str, end: &str) -> Vec<String> {
    c.send(format!("{command}\r\n"));
    let reply = String::from_utf8(c.read_until(format!("\n{end}").as_bytes())).unwrap();
    let body = reply.strip_suffix(end).unwrap();
    body.split_inclusive('\n').map(str::to_string).collect()
}

#[test]
fn key_dumps_list_items_on_flash_once_and_only_while_a_get_finds_them() {
    let file = flash_file("dump");
    let s = server(&file);
    let mut c = s.connect();
    fill(&mut c);
    let on_flash = flash_keys(&mut c, &s, 40);
    for &i in &on_flash[..5] {
        c.send(format!("delete key:{i}\r\n"));
        assert_eq!(c.read_line(), "DELETED\r\n");
    }
    let meta = dump_lines(&mut c, "lru_crawler metadump all", "END\r\n");
    assert_eq!(meta[0], "OK\r\n", "the crawler's reply comes first");
    let mut listed = std::collections::HashMap::new();
    for line in &meta[1..] {
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .unwrap_or_else(|| panic!("{name} missing in {line:?}"))
                .to_string()
        };
        let key = field("key=").replace("%3A", ":");
        let flags: u32 = field("flags=").parse().unwrap();
        assert!(
            listed.insert(key.clone(), flags).is_none(),
            "{key} listed twice"
        );
    }
    for &i in &on_flash[5..] {
        assert_eq!(
            listed.get(&format!("key:{i}")),
            Some(&(i as u32)),
            "key:{i}"
        );
    }
    for &i in &on_flash[..5] {
        assert!(
            !listed.contains_key(&format!("key:{i}")),
            "deleted key:{i} listed"
        );
    }
    let mg = dump_lines(&mut c, "lru_crawler mgdump all", "EN\r\n");
    assert_eq!(
        mg.len(),
        listed.len() + 1,
        "mgdump lists what metadump does"
    );
    let items = dump_lines(&mut c, "stats cachedump 1 0", "END\r\n");
    assert_eq!(items.len(), listed.len());
    // Listed is exactly what a get finds (each key read once: nothing moves into RAM).
    let mut found = 0;
    for i in 0..N {
        let key = format!("key:{i}");
        let hit = get(&mut c, &key).is_some();
        assert_eq!(
            hit,
            listed.contains_key(&key),
            "{key}: a get and the dump disagree"
        );
        found += usize::from(hit);
    }
    assert!(found > N / 2, "{found} of {N} found");
    assert!(c.stat("get_extstore") > 1000);
}

#[test]
fn flash_reads_run_on_the_workers_io_uring_or_on_the_reader_threads_when_asked() {
    for io in [FlashIo::Uring, FlashIo::Threads] {
        let file = flash_file(&format!("io-{io:?}"));
        let spec = memfleet_flash::FlashSpec::parse(&format!("{}:64m", file.0.display())).unwrap();
        let s = TestServer::with(move |s| {
            s.limits.memory_bytes = 8 << 20;
            s.flash.files = vec![spec];
            s.flash.threads = 2;
            s.flash.io = io;
        });
        let mut c = s.connect();
        fill(&mut c);
        let keys = flash_keys(&mut c, &s, 20);
        // One multi-get of 20 flash keys: their reads go to the device together.
        let line: String = keys.iter().map(|i| format!(" key:{i}")).collect();
        c.send(format!("get{line}\r\n"));
        let mut served = 0;
        loop {
            let l = c.read_line();
            if l == "END\r\n" {
                break;
            }
            let words: Vec<&str> = l.split_whitespace().collect();
            let i: usize = words[1].strip_prefix("key:").unwrap().parse().unwrap();
            let len: usize = words[3].parse().unwrap();
            let data = c.read_n(len + 2);
            assert_eq!(&data[..len], value(i).as_bytes(), "key:{i} ({io:?})");
            served += 1;
        }
        assert!(served >= 19, "{served} of 20 served ({io:?})");
        let rings = c.stat("flash_io_uring_workers");
        match io {
            // A kernel that refuses io_uring falls back to the threads (and says so).
            FlashIo::Uring => assert!(rings <= 1, "{rings}"),
            FlashIo::Threads => assert_eq!(rings, 0, "no ring with --flash-io threads"),
        }
        if io == FlashIo::Uring && io_uring_allowed() {
            assert_eq!(rings, 1, "the worker that read flash made its ring");
        }
    }
}

/// Whether this kernel lets processes use io_uring (`kernel.io_uring_disabled` 0).
fn io_uring_allowed() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").map_or(true, |v| v.trim() == "0")
}

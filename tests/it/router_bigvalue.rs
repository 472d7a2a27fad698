//! `bigvalue` through a real `memfleet router` in front of a real `memfleet server` run
//! with memcached's default 1 MiB item limit: a 3 MB value is stored as chunks and read
//! back byte for byte; a lost chunk is a miss; an overwrite or a delete leaves no old chunk
//! readable.

use crate::support;

use std::io::Read;
use support::{free_port, memfleet_server, until_serving, Conn};

/// What this module asks of a text connection beyond `support::Conn`'s own.
trait ConnExt {
    fn store(&mut self, command: &str, key: &str, flags: u32, value: &[u8]) -> String;
    fn fetch(&mut self, command: &str, key: &str) -> Option<(String, Vec<u8>)>;
    fn keys(&mut self) -> Vec<String>;
}

impl ConnExt for Conn {
    fn store(&mut self, command: &str, key: &str, flags: u32, value: &[u8]) -> String {
        let mut req = format!("{command} {key} {flags} 0 {}\r\n", value.len()).into_bytes();
        req.extend_from_slice(value);
        req.extend_from_slice(b"\r\n");
        self.send(&req);
        self.read_line()
    }

    /// A one-key retrieval (`get`, `gets`, ...): (the VALUE line, the data), or `None`.
    fn fetch(&mut self, command: &str, key: &str) -> Option<(String, Vec<u8>)> {
        let first = self.line(format!("{command} {key}\r\n"));
        if first == "END\r\n" {
            return None;
        }
        let len: usize = first.split(' ').nth(3).unwrap().trim().parse().unwrap();
        let mut data = vec![0; len + 2];
        self.0.read_exact(&mut data).unwrap();
        data.truncate(len);
        assert_eq!(self.read_line(), "END\r\n");
        Some((first, data))
    }

    /// Every key `lru_crawler mgdump all` lists.
    fn keys(&mut self) -> Vec<String> {
        self.send(b"lru_crawler mgdump all\r\n");
        let mut keys = Vec::new();
        loop {
            let l = self.read_line();
            if l == "OK\r\n" {
                continue;
            }
            match l.trim_end().strip_prefix("mg ") {
                Some(k) => keys.push(k.to_string()),
                None => return keys,
            }
        }
    }
}

#[test]
fn a_big_value_is_chunked_reassembled_and_never_read_wrong() {
    let (_server, server) = memfleet_server(&["-t", "1", "-m", "64"]);
    until_serving(server);
    let port = free_port();
    let file = std::env::temp_dir().join(format!("memfleet-bigvalue-{}.toml", std::process::id()));
    std::fs::write(
        &file,
        format!(
            "[pools.old]\nservers = [\"127.0.0.1:{server}\"]\n\
             [routes.big]\nlisten = \"127.0.0.1:{port}\"\ntype = \"bigvalue\"\n\
             child = \"old\"\nthreshold = 262144\nitem_size_max = 4194304\n"
        ),
    )
    .unwrap();
    let _router = support::router(&file, None);
    until_serving(port);
    let (mut c, mut direct) = (Conn::new(port), Conn::new(server));
    let big = |seed: u8| -> Vec<u8> {
        (0..3_000_000u32)
            .map(|i| (i.wrapping_mul(31) as u8) ^ seed)
            .collect()
    };
    let (first, second) = (big(1), big(2));

    // 3 MB through a pool of 1 MiB servers: chunks and an index, read back exactly.
    assert_eq!(c.store("set", "k", 42, &first), "STORED\r\n");
    let (line, data) = c.fetch("get", "k").expect("a hit");
    assert_eq!(line, "VALUE k 42 3000000\r\n");
    assert!(data == first, "the value came back changed");
    let (line, _) = c.fetch("gets", "k").unwrap();
    assert!(line.starts_with("VALUE k 42 3000000 "), "{line}");
    c.send(b"mg k v f s\r\n");
    assert_eq!(c.read_line(), "VA 3000000 f42 s3000000\r\n");
    let mut data = vec![0; 3_000_002];
    c.0.read_exact(&mut data).unwrap();
    assert!(data[..3_000_000] == first[..]);
    let chunks = |d: &mut Conn| -> Vec<String> {
        d.keys()
            .into_iter()
            .filter(|k| k.starts_with("__memfleet_bv:"))
            .collect()
    };
    let first_chunks = chunks(&mut direct);
    assert_eq!(first_chunks.len(), 12, "3,000,000 bytes in 256 KiB chunks");
    let (_, index) = direct.fetch("get", "k").unwrap();
    assert!(index.len() < 100, "the server holds an index under the key");

    // An overwrite: the new value, never a mix with the old chunks (still stored).
    assert_eq!(c.store("set", "k", 7, &second), "STORED\r\n");
    let (line, data) = c.fetch("get", "k").unwrap();
    assert_eq!(line, "VALUE k 7 3000000\r\n");
    assert!(data == second, "an overwrite read back changed");
    let all = chunks(&mut direct);
    assert_eq!(all.len(), 24);
    assert!(first_chunks.iter().all(|k| all.contains(k)));

    // A lost chunk: a miss, not a shorter or patched value.
    let lost = all.iter().find(|k| !first_chunks.contains(k)).unwrap();
    assert_eq!(direct.line(format!("delete {lost}\r\n")), "DELETED\r\n");
    assert_eq!(c.fetch("get", "k"), None);
    assert_eq!(c.line("mg k v\r\n"), "EN\r\n");

    // A delete: nothing readable is left, though old chunks wait for eviction.
    assert_eq!(c.store("set", "k", 0, &first), "STORED\r\n");
    assert!(c.fetch("get", "k").is_some());
    assert_eq!(c.line("delete k\r\n"), "DELETED\r\n");
    assert_eq!(c.fetch("get", "k"), None);

    // Small values pass through as they are; one that looks like an index is chunked too.
    assert_eq!(c.store("set", "s", 3, b"small"), "STORED\r\n");
    assert_eq!(direct.fetch("get", "s").unwrap().1, b"small");
    let lookalike = b"\x00memfleet-bigvalue-1 0000000000000001 1 1 0000000000000001";
    assert_eq!(c.store("set", "l", 0, lookalike), "STORED\r\n");
    assert_eq!(c.fetch("get", "l").unwrap().1, lookalike);

    // What it cannot do safely is refused; over its item_size_max as memcached refuses.
    assert!(c
        .store("append", "s", 0, b"x")
        .starts_with("SERVER_ERROR append and prepend"));
    assert!(c.store("prepend", "s", 0, b"x").starts_with("SERVER_ERROR"));
    assert_eq!(
        c.store("set", "huge", 0, &vec![b'h'; 4 << 20]),
        "SERVER_ERROR object too large for cache\r\n"
    );
    assert_eq!(c.fetch("get", "s").unwrap().1, b"small");
    let _ = std::fs::remove_file(file);
}

//! Warm restart through the server (Facebook §6.4): a graceful stop saves the snapshot next
//! to the memory file, the next start with the same file serves the same items — values,
//! flags, CAS and TTLs — and a start that cannot trust the file starts empty.

use crate::common;

use common::{Client, TestServer};
use memfleet_server::warm::{meta_path, Start};
use std::path::PathBuf;

struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_file(meta_path(&self.0));
    }
}

fn memory_file(name: &str) -> TempFile {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    TempFile(dir.join(format!("memfleet-warm-{}-{name}", std::process::id())))
}

fn server(file: &TempFile, mib: usize) -> TestServer {
    let path = file.0.clone();
    TestServer::with(move |s| {
        s.memory_file = Some(path);
        s.limits.memory_bytes = mib << 20;
    })
}

fn gets_cas(c: &mut Client, key: &str) -> String {
    c.send(format!("gets {key}\r\n"));
    c.read_line()
}

#[test]
fn a_graceful_restart_serves_the_same_items() {
    let file = memory_file("same");
    let s = server(&file, 16);
    assert_eq!(
        s.server().start_kind(),
        &Start::Cold("a new memory file".into())
    );
    let mut c = s.connect();
    for i in 0..2000 {
        c.check(format!("set key:{i} {i} 0 6\r\nv{i:05}\r\n"), "STORED\r\n");
    }
    c.check("set ttl 3 300 2\r\nhi\r\n", "STORED\r\n");
    c.check("delete key:7\r\n", "DELETED\r\n");
    let cas_line = gets_cas(&mut c, "key:42");
    drop(c);
    s.stop();
    assert!(
        meta_path(&file.0).exists(),
        "a graceful stop writes the snapshot"
    );

    let s = server(&file, 16);
    match s.server().start_kind() {
        Start::Warm { items, .. } => assert!(*items >= 2000, "{items}"),
        other => panic!("expected a warm start, got {other:?}"),
    }
    assert!(
        !meta_path(&file.0).exists(),
        "the snapshot is consumed at start"
    );
    let mut c = s.connect();
    for i in (0..2000).step_by(13) {
        if i == 7 {
            continue;
        }
        c.check(
            format!("get key:{i}\r\n"),
            format!("VALUE key:{i} {i} 6\r\nv{i:05}\r\nEND\r\n"),
        );
    }
    c.check("get key:7\r\n", "END\r\n");
    assert_eq!(gets_cas(&mut c, "key:42"), cas_line, "CAS unchanged");
    c.read_line();
    c.read_line();
    c.send("mg ttl v t f\r\n");
    let line = c.read_line();
    let ttl: u32 = line
        .split(' ')
        .find_map(|w| w.strip_prefix('t'))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!((290..=300).contains(&ttl), "{line}");
    assert!(line.contains(" f3"), "{line}");
    assert_eq!(c.read_line(), "hi\r\n");
    // Writes go on as usual after a restart.
    c.check("set after 0 0 1\r\nx\r\n", "STORED\r\n");
    c.check("get after\r\n", "VALUE after 0 1\r\nx\r\nEND\r\n");
}

#[test]
fn without_a_snapshot_or_with_another_size_the_cache_starts_empty() {
    let file = memory_file("cold");
    let s = server(&file, 16);
    let mut c = s.connect();
    c.check("set k 0 0 1\r\nv\r\n", "STORED\r\n");
    drop(c);
    s.stop();
    // A crash leaves no snapshot: simulate one by losing it.
    std::fs::remove_file(meta_path(&file.0)).unwrap();
    let s = server(&file, 16);
    assert!(matches!(s.server().start_kind(), Start::Cold(why) if why.contains("no snapshot")));
    s.connect().check("get k\r\n", "END\r\n");
    let mut c = s.connect();
    c.check("set k 0 0 1\r\nv\r\n", "STORED\r\n");
    drop(c);
    s.stop();
    // Another memory size cannot reuse the file.
    let s = server(&file, 32);
    match s.server().start_kind() {
        Start::Cold(why) => assert!(why.contains("bytes"), "{why}"),
        other => panic!("{other:?}"),
    }
    s.connect().check("get k\r\n", "END\r\n");
    s.stop();
    // A corrupt snapshot is refused too.
    let meta = meta_path(&file.0);
    let mut bytes = std::fs::read(&meta).unwrap();
    bytes[40] ^= 0xff;
    std::fs::write(&meta, bytes).unwrap();
    let s = server(&file, 32);
    assert!(matches!(s.server().start_kind(), Start::Cold(why) if why.contains("checksum")));
}

#[test]
fn a_start_that_fails_keeps_the_snapshot_for_the_next() {
    let file = memory_file("failed");
    let s = server(&file, 16);
    s.connect().check("set k 0 0 1\r\nv\r\n", "STORED\r\n");
    s.stop();
    // The port is taken: this start fails before it opens the memory file.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let failed = memfleet_server::Server::start(memfleet_server::Settings {
        memory_file: Some(file.0.clone()),
        ..memfleet_server::Settings::single_worker(taken.local_addr().unwrap().port(), 16 << 20)
    });
    assert!(failed.is_err());
    assert!(meta_path(&file.0).exists());
    let s = server(&file, 16);
    assert!(matches!(s.server().start_kind(), Start::Warm { .. }));
    s.connect()
        .check("get k\r\n", "VALUE k 0 1\r\nv\r\nEND\r\n");
}

#[test]
fn two_servers_cannot_share_a_memory_file() {
    let file = memory_file("shared");
    let _first = server(&file, 16);
    let path = file.0.clone();
    let second = memfleet_server::Server::start(memfleet_server::Settings {
        memory_file: Some(path),
        ..memfleet_server::Settings::single_worker(0, 16 << 20)
    });
    let err = second.err().expect("the second server must refuse");
    assert!(format!("{err:#}").contains("in use"), "{err:#}");
}

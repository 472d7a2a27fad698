//! Warm restart in the engine: a heap in a file mapping plus a snapshot bring back every
//! item (value, flags, CAS, TTL, lease) in a new `Cache`; a snapshot of another format,
//! layout or geometry, or with a flipped byte, is refused; one written by another release
//! of the same format and layout (a rolling upgrade) is taken.

use memfleet_storage::memmap2::MmapMut;
use memfleet_storage::{
    Cache, Clock, Config, Expiry, LeaseOutcome, LeaseRead, SnapshotError, StoreMode, StoreStatus,
};
use std::fs::{File, OpenOptions};
use std::path::PathBuf;

struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn temp(name: &str) -> TempFile {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    TempFile(dir.join(format!("memfleet-test-{}-{name}", std::process::id())))
}

fn map(path: &PathBuf, len: usize) -> MmapMut {
    let file: File = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .unwrap();
    file.set_len(len as u64).unwrap();
    // SAFETY: the test owns the file; nothing else maps or truncates it meanwhile.
    unsafe { MmapMut::map_mut(&file).unwrap() }
}

fn config(clock: &Clock, mib: usize) -> Config {
    Config::new(mib << 20)
        .segment_size(1 << 20)
        .clock(clock.clone())
        .stale_after_delete(10)
}

#[test]
fn items_survive_a_restart_with_values_flags_cas_and_ttls() {
    let file = temp("roundtrip");
    let clock = Clock::manual();
    clock.set(100);
    let cfg = config(&clock, 16);
    let len = Cache::mapping_len(&cfg).unwrap();
    let cache = Cache::with_mapping(cfg.clone(), map(&file.0, len)).unwrap();
    let mut cas = Vec::new();
    {
        let mut h = cache.handle();
        for i in 0..20_000u32 {
            let key = format!("key:{i}");
            let value = format!("value-{i}-{}", "x".repeat((i % 50) as usize));
            let ttl = if i % 2 == 0 {
                Expiry::Never
            } else {
                Expiry::After(60)
            };
            h.set(key.as_bytes(), value.as_bytes(), i, ttl).unwrap();
        }
        assert!(h.delete(b"key:1"));
        // A lease handed out before the restart is honoured after it.
        let token = h
            .lease_read(
                b"leased",
                LeaseRead {
                    vivify: Some(Expiry::After(60)),
                    ..Default::default()
                },
                |o| match o {
                    LeaseOutcome::Found { item, won: true } => item.cas(),
                    other => panic!("{other:?}"),
                },
            )
            .unwrap();
        // Read after the delete and the lease, which give their chains new uniques (and
        // with them any key of those chains).
        for i in (0..20_000u32).step_by(97) {
            cas.push((i, h.get(format!("key:{i}").as_bytes()).unwrap().cas()));
        }
        cas.push((u32::MAX, token));
    }
    let snapshot = cache.snapshot().unwrap();
    let before = cache.stats().items;
    drop(cache);

    let clock2 = Clock::manual();
    let (cache, restored) =
        Cache::resume(config(&clock2, 16), map(&file.0, len), &snapshot).unwrap();
    assert_eq!(cache.stats().items, before);
    assert!(restored.items >= 20_000, "{restored:?}");
    assert_eq!(cache.clock().now(), 100, "the clock carries on");
    let mut h = cache.handle();
    for i in (0..20_000u32).step_by(7) {
        let key = format!("key:{i}");
        if i == 1 {
            assert!(h.get(key.as_bytes()).is_none(), "deleted stays deleted");
            continue;
        }
        let item = h
            .get(key.as_bytes())
            .unwrap_or_else(|| panic!("{key} lost"));
        let value = format!("value-{i}-{}", "x".repeat((i % 50) as usize));
        assert_eq!((item.value(), item.flags()), (value.as_bytes(), i));
        let ttl = item.ttl_remaining(cache.clock().now());
        assert_eq!(ttl.is_none(), i % 2 == 0, "{key}: {ttl:?}");
    }
    for (i, before) in &cas[..cas.len() - 1] {
        assert_eq!(
            h.get(format!("key:{i}").as_bytes()).unwrap().cas(),
            *before,
            "key:{i}"
        );
    }
    // The sequence carries on: a write after the restart takes a unique above all before.
    h.set(b"after-restart", b"v", 0, Expiry::Never).unwrap();
    let most = cas.iter().map(|c| c.1).max().unwrap();
    assert!(h.get(b"after-restart").unwrap().cas() > most);
    let token = cas.last().unwrap().1;
    assert_eq!(
        h.store(
            StoreMode::Lease(token),
            b"leased",
            b"filled",
            0,
            Expiry::Never
        )
        .unwrap(),
        StoreStatus::Stored
    );
    // TTLs run on: the 60-second items go 60 seconds after they were set.
    clock2.set(161);
    assert!(h.get(b"key:3").is_none());
    assert!(h.get(b"key:4").is_some());
    // And the restored cache takes new writes and evicts as usual.
    for i in 0..40_000u32 {
        h.set(
            format!("new:{i}").as_bytes(),
            &[b'n'; 400],
            0,
            Expiry::Never,
        )
        .unwrap();
    }
}

#[test]
fn bad_snapshots_are_refused() {
    let file = temp("refused");
    let clock = Clock::manual();
    let cfg = config(&clock, 16);
    let len = Cache::mapping_len(&cfg).unwrap();
    let cache = Cache::with_mapping(cfg.clone(), map(&file.0, len)).unwrap();
    cache.handle().set(b"k", b"v", 0, Expiry::Never).unwrap();
    // Not while a handle is live.
    let live = cache.handle();
    assert_eq!(cache.snapshot().unwrap_err(), SnapshotError::InUse(1));
    drop(live);
    let snapshot = cache.snapshot().unwrap();
    drop(cache);

    let mut torn = snapshot.clone();
    torn[100] ^= 1;
    let refused = |cfg: Config, bytes: &[u8], len: usize| match Cache::resume(
        cfg,
        map(&file.0, len),
        bytes,
    ) {
        Err(SnapshotError::Invalid(why)) => why,
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("a bad snapshot was accepted"),
    };
    assert!(refused(cfg.clone(), &torn, len).contains("checksum"));
    assert!(refused(cfg.clone(), &snapshot[..snapshot.len() / 2], len).contains("checksum"));
    let bigger = config(&clock, 32);
    let why = refused(
        bigger.clone(),
        &snapshot,
        Cache::mapping_len(&bigger).unwrap(),
    );
    assert!(why.contains("segment count"), "{why}");
    // Written by another release (same format and layout): taken, as an upgrade needs.
    // The header: magic (8), format (4), layout (8), the version's length (8) and bytes.
    let resealed = |edit: &dyn Fn(&mut Vec<u8>)| {
        let mut body = snapshot[..snapshot.len() - 8].to_vec();
        edit(&mut body);
        let sum = xxhash_rust::xxh3::xxh3_64(&body).to_le_bytes();
        body.extend_from_slice(&sum);
        body
    };
    let older = resealed(&|b| {
        let len = u64::from_le_bytes(b[20..28].try_into().unwrap()) as usize;
        let older = b"0.0.1-older-release";
        b.splice(28..28 + len, older.iter().copied());
        b[20..28].copy_from_slice(&(older.len() as u64).to_le_bytes());
    });
    let (cache, _) = Cache::resume(cfg.clone(), map(&file.0, len), &older).unwrap();
    assert_eq!(cache.handle().get(b"k").unwrap().value(), b"v");
    let resnapshot = cache.snapshot().unwrap();
    drop(cache);
    assert_eq!(resnapshot.len(), snapshot.len());
    // Another layout (a release that changed what the heap's bytes mean) or format: refused.
    let other_layout = resealed(&|b| b[12] ^= 1);
    assert!(refused(cfg.clone(), &other_layout, len).contains("layout"));
    let other_format = resealed(&|b| b[8] ^= 1);
    assert!(refused(cfg.clone(), &other_format, len).contains("format"));
    // The good snapshot still works on the right geometry.
    let (cache, _) = Cache::resume(cfg, map(&file.0, len), &snapshot).unwrap();
    assert_eq!(cache.handle().get(b"k").unwrap().value(), b"v");
    // An allocated heap has nothing to carry over.
    let plain = Cache::new(Config::new(16 << 20)).unwrap();
    assert_eq!(plain.snapshot().unwrap_err(), SnapshotError::NotMapped);
}

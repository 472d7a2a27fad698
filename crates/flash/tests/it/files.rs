//! `FlashFiles` against real files: in the temp dir, /var/tmp and /dev/shm (tmpfs, where
//! O_DIRECT may be refused), so both the O_DIRECT and the page-cache paths run.

use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use memfleet_flash::{FlashError, FlashFiles, FlashOptions, FlashSpec, SpecError, WriteDone};

const SEG: usize = 16 << 10;

/// A fresh directory under `base`, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(base: &Path, name: &str) -> Dir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("memfleet-flash-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    fn spec(&self, file: &str, size: u64) -> FlashSpec {
        FlashSpec {
            path: self.0.join(file),
            size,
        }
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The directories to run in: the temp dir always, /var/tmp and /dev/shm where they exist.
fn bases() -> Vec<PathBuf> {
    let mut bases = vec![std::env::temp_dir()];
    for extra in ["/var/tmp", "/dev/shm"] {
        let extra = PathBuf::from(extra);
        if extra.is_dir() && !bases.contains(&extra) {
            bases.push(extra);
        }
    }
    bases
}

/// Whether `dir`'s filesystem opens files with O_DIRECT.
fn o_direct_works(dir: &Path) -> bool {
    let probe = dir.join("probe");
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe);
    let _ = std::fs::remove_file(&probe);
    match opened {
        Ok(_) => true,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => false,
        Err(e) => panic!("probe {}: {e}", probe.display()),
    }
}

fn opts() -> FlashOptions {
    FlashOptions {
        segment_size: SEG,
        ..FlashOptions::default()
    }
}

/// A segment whose every byte differs from its neighbours' and from other segments'.
fn pattern(phys: u32) -> Arc<[u8]> {
    (0..SEG)
        .map(|i| (i % 251) as u8 ^ (phys as u8).wrapping_mul(37))
        .collect::<Vec<u8>>()
        .into()
}

/// A write's callback and the channel its result arrives on.
fn callback() -> (WriteDone, mpsc::Receiver<std::io::Result<()>>) {
    let (tx, rx) = mpsc::channel();
    let done: WriteDone = Box::new(move |result| tx.send(result).unwrap());
    (done, rx)
}

fn write_wait(files: &FlashFiles, phys: u32, bytes: Arc<[u8]>) -> std::io::Result<()> {
    let (done, rx) = callback();
    assert!(files.try_write(phys, bytes, done).is_ok(), "queue full");
    rx.recv_timeout(Duration::from_secs(10)).unwrap()
}

#[test]
fn flash_files_are_send_and_sync_and_reads_are_unpin_futures() {
    fn check<T: Send + Sync>() {}
    check::<FlashFiles>();
    fn future<F: std::future::Future<Output = std::io::Result<Vec<u8>>> + Send + Unpin>() {}
    future::<memfleet_flash::FlashRead>();
}

#[test]
fn spec_parsing() {
    let ok = |s: &str| FlashSpec::parse(s).unwrap();
    assert_eq!(
        ok("/x:1g"),
        FlashSpec {
            path: "/x".into(),
            size: 1 << 30
        }
    );
    assert_eq!(ok("/x:64M").size, 64 << 20);
    assert_eq!(ok("/x:4096").size, 4096);
    assert_eq!(ok("/x:8k").size, 8192);
    assert_eq!(ok("/x:2T").size, 2 << 40);
    assert_eq!(
        ok("/a:b:2m"),
        FlashSpec {
            path: "/a:b".into(),
            size: 2 << 20
        }
    );
    assert_eq!("/y:1G".parse::<FlashSpec>().unwrap(), ok("/y:1g"));
    let err = |s: &str| FlashSpec::parse(s).unwrap_err();
    assert!(matches!(err("/x"), SpecError::NoSize(_)));
    assert!(matches!(err(":1g"), SpecError::EmptyPath(_)));
    for bad in [
        "/x:",
        "/x:g",
        "/x:1.5g",
        "/x:-1",
        "/x:1gb",
        "/x:12q",
        "/f2:128m:compact",
        "/x:99999999999999999999",
    ] {
        assert!(matches!(err(bad), SpecError::BadSize(_)), "{bad}");
    }
    assert!(matches!(err("/x:0"), SpecError::ZeroSize(_)));
    assert!(matches!(err("/x:0m"), SpecError::ZeroSize(_)));
    assert!(err("/x")
        .to_string()
        .starts_with("must supply size to ext_path"));
}

#[test]
fn unaligned_ranges_read_back_exactly_in_every_filesystem() {
    for base in bases() {
        let dir = Dir::new(&base, "ranges");
        let spec = dir.spec("ext", 3 * SEG as u64 + 100);
        let files = FlashFiles::open(std::slice::from_ref(&spec), opts()).unwrap();
        assert_eq!(files.segments(), 3, "floor(size / segment)");
        assert_eq!(files.segment_size(), SEG);
        assert_eq!(files.direct(), o_direct_works(&dir.0), "{}", base.display());
        assert_eq!(std::fs::metadata(&spec.path).unwrap().len(), 3 * SEG as u64);

        let data = pattern(1);
        write_wait(&files, 1, data.clone()).unwrap();
        let ranges = [
            (0, 1),
            (4095, 2),
            (4000, 5000),
            (1, SEG - 1),
            (SEG - 1, 1),
            (0, SEG),
            (8191, 4098),
            (5, 0),
        ];
        for (offset, len) in ranges {
            let got = files.read_blocking(1, offset as u32, len as u32).unwrap();
            assert_eq!(
                got,
                &data[offset..offset + len],
                "{} {offset}+{len}",
                base.display()
            );
        }
        assert_eq!(
            files.read_blocking(0, 0, 8).unwrap(),
            vec![0; 8],
            "never written"
        );
        let past = files.read_blocking(1, SEG as u32 - 10, 11).unwrap_err();
        assert_eq!(past.kind(), ErrorKind::InvalidInput);
        assert_eq!(
            files.read_blocking(3, 0, 1).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        let stats = files.stats();
        assert_eq!(
            (stats.writes, stats.write_bytes, stats.write_errors),
            (1, SEG as u64, 0)
        );
        assert_eq!(
            (stats.reads, stats.read_errors),
            (ranges.len() as u64 + 1, 2)
        );
        files.sync().unwrap();
    }
}

#[test]
fn two_files_are_numbered_in_order() {
    let dir = Dir::new(&std::env::temp_dir(), "two");
    let (a, b) = (
        dir.spec("a", 2 * SEG as u64),
        dir.spec("b", 3 * SEG as u64 + 4095),
    );
    let files = FlashFiles::open(&[a.clone(), b.clone()], opts()).unwrap();
    assert_eq!(files.segments(), 5);
    for phys in 0..5 {
        write_wait(&files, phys, pattern(phys)).unwrap();
    }
    let (on_a, on_b) = (
        std::fs::read(&a.path).unwrap(),
        std::fs::read(&b.path).unwrap(),
    );
    assert_eq!((on_a.len(), on_b.len()), (2 * SEG, 3 * SEG));
    assert_eq!(&on_a[SEG..], &pattern(1)[..]);
    assert_eq!(&on_b[..SEG], &pattern(2)[..]);
    assert_eq!(&on_b[2 * SEG..], &pattern(4)[..]);
    assert_eq!(
        files.read_blocking(4, 100, 50).unwrap(),
        &pattern(4)[100..150]
    );

    // The caller's bugs come back through the callback, from the writer.
    let bad = write_wait(&files, 5, pattern(5)).unwrap_err();
    assert_eq!(bad.kind(), ErrorKind::InvalidInput);
    let short: Arc<[u8]> = vec![1u8; SEG - 4096].into();
    assert_eq!(
        write_wait(&files, 2, short).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        &std::fs::read(&b.path).unwrap()[..SEG],
        &pattern(2)[..],
        "nothing written"
    );
    assert_eq!(files.stats().write_errors, 2);
}

#[test]
fn a_second_open_of_the_same_file_is_locked() {
    let dir = Dir::new(&std::env::temp_dir(), "lock");
    let spec = dir.spec("ext", 2 * SEG as u64);
    let first = FlashFiles::open(std::slice::from_ref(&spec), opts()).unwrap();
    let err = FlashFiles::open(std::slice::from_ref(&spec), opts()).unwrap_err();
    assert!(
        matches!(&err, FlashError::Locked { path } if *path == spec.path),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&*spec.path.to_string_lossy()),
        "{err}"
    );
    // Listing a file twice is the same mistake.
    let other = dir.spec("other", 2 * SEG as u64);
    let twice = FlashFiles::open(&[other.clone(), other.clone()], opts()).unwrap_err();
    assert!(matches!(twice, FlashError::Locked { .. }), "{twice:?}");
    drop(first);
    FlashFiles::open(&[spec], opts()).expect("the lock goes with the files");
}

#[test]
fn bad_options_are_refused() {
    let dir = Dir::new(&std::env::temp_dir(), "opts");
    let spec = dir.spec("ext", SEG as u64 - 1);
    let err = FlashFiles::open(std::slice::from_ref(&spec), opts()).unwrap_err();
    assert!(
        matches!(err, FlashError::TooSmall { size, segment: SEG, .. } if size == SEG as u64 - 1)
    );
    for segment_size in [0, 1000, 4097, 1 << 32] {
        let opts = FlashOptions {
            segment_size,
            ..opts()
        };
        let err = FlashFiles::open(&[dir.spec("ext", 1 << 20)], opts).unwrap_err();
        assert!(
            matches!(err, FlashError::SegmentSize(s) if s == segment_size),
            "{err:?}"
        );
    }
    let zero_threads = FlashOptions {
        read_threads: 0,
        ..opts()
    };
    let err = FlashFiles::open(&[dir.spec("ext", 1 << 20)], zero_threads).unwrap_err();
    assert!(matches!(err, FlashError::Options(_)), "{err:?}");
    assert!(matches!(
        FlashFiles::open(&[], opts()).unwrap_err(),
        FlashError::Options(_)
    ));
    let missing = dir.0.join("no-such-dir").join("ext");
    let err = FlashFiles::open(
        &[FlashSpec {
            path: missing.clone(),
            size: 1 << 20,
        }],
        opts(),
    )
    .unwrap_err();
    assert!(
        matches!(&err, FlashError::Open { path, .. } if *path == missing),
        "{err:?}"
    );
}

#[test]
fn try_write_refuses_when_the_queue_is_full_and_gives_the_callback_back() {
    let dir = Dir::new(&std::env::temp_dir(), "full");
    let slow = FlashOptions {
        write_queue: 1,
        delay: Some(Duration::from_millis(300)),
        ..opts()
    };
    let files = FlashFiles::open(&[dir.spec("ext", 4 * SEG as u64)], slow).unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let mut accepted = 0;
    let refused = loop {
        let ran = ran.clone();
        let done: WriteDone = Box::new(move |result| {
            result.unwrap();
            ran.fetch_add(1, Ordering::SeqCst);
        });
        match files.try_write(accepted, pattern(accepted), done) {
            Ok(()) => accepted += 1,
            Err(done) => break done,
        }
        assert!(accepted <= 2, "one being written and one queued at most");
    };
    assert!(accepted >= 1);
    assert_eq!(ran.load(Ordering::SeqCst), 0, "refused callback not called");
    let stats = files.stats();
    assert_eq!(stats.writes_rejected, 1);
    assert_eq!(stats.write_queue_depth, u64::from(accepted));
    refused(Ok(()));
    assert_eq!(
        ran.load(Ordering::SeqCst),
        1,
        "the callback given back is the caller's"
    );
    drop(files);
    assert_eq!(ran.load(Ordering::SeqCst), 1 + accepted as usize);
}

#[test]
fn drop_finishes_queued_writes() {
    let dir = Dir::new(&std::env::temp_dir(), "drop");
    let spec = dir.spec("ext", 3 * SEG as u64);
    let slow = FlashOptions {
        write_queue: 3,
        delay: Some(Duration::from_millis(50)),
        ..opts()
    };
    let files = FlashFiles::open(std::slice::from_ref(&spec), slow).unwrap();
    let (tx, rx) = mpsc::channel();
    for phys in 0..3 {
        let tx = tx.clone();
        let done: WriteDone = Box::new(move |result| tx.send((phys, result.is_ok())).unwrap());
        assert!(files.try_write(phys, pattern(phys), done).is_ok());
    }
    drop(files);
    drop(tx);
    let results: Vec<_> = rx.iter().collect();
    assert_eq!(results, vec![(0, true), (1, true), (2, true)]);
    let on_disk = std::fs::read(&spec.path).unwrap();
    for phys in 0..3 {
        assert_eq!(&on_disk[phys * SEG..][..SEG], &pattern(phys as u32)[..]);
    }
}

#[test]
fn a_truncated_file_reads_as_an_error_not_zeros() {
    for base in bases() {
        let dir = Dir::new(&base, "trunc");
        let spec = dir.spec("ext", 2 * SEG as u64);
        let files = FlashFiles::open(std::slice::from_ref(&spec), opts()).unwrap();
        write_wait(&files, 0, pattern(0)).unwrap();
        write_wait(&files, 1, pattern(1)).unwrap();
        // Segment 1 cut 1000 bytes in, inside its first block.
        let other = std::fs::OpenOptions::new()
            .write(true)
            .open(&spec.path)
            .unwrap();
        other.set_len(SEG as u64 + 1000).unwrap();
        assert_eq!(
            files.read_blocking(1, 0, 1000).unwrap(),
            &pattern(1)[..1000]
        );
        assert_eq!(
            files.read_blocking(0, SEG as u32 - 8, 8).unwrap(),
            &pattern(0)[SEG - 8..]
        );
        for (offset, len) in [(900, 200), (999, 2), (5000, 10), (0, SEG as u32)] {
            let err = files.read_blocking(1, offset, len).unwrap_err();
            assert_eq!(
                err.kind(),
                ErrorKind::UnexpectedEof,
                "{} {offset}+{len}",
                base.display()
            );
        }
        other.set_len(0).unwrap();
        assert_eq!(
            files.read_blocking(0, 0, 1).unwrap_err().kind(),
            ErrorKind::UnexpectedEof
        );
        let stats = files.stats();
        assert_eq!((stats.reads, stats.read_errors), (2, 5));
    }
}

#[tokio::test]
async fn reads_resolve_as_futures() {
    let dir = Dir::new(&std::env::temp_dir(), "async");
    let files = FlashFiles::open(&[dir.spec("ext", 2 * SEG as u64)], opts()).unwrap();
    write_wait(&files, 1, pattern(1)).unwrap();
    let (a, b) = tokio::join!(files.read(1, 4090, 20), files.read(1, 0, SEG as u32));
    assert_eq!(a.unwrap(), &pattern(1)[4090..4110]);
    assert_eq!(b.unwrap(), &pattern(1)[..]);
    assert_eq!(
        files.read(2, 0, 1).await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    let stats = files.stats();
    assert_eq!(
        (stats.reads, stats.read_bytes, stats.read_errors),
        (2, 20 + SEG as u64, 1)
    );
    assert_eq!(stats.read_queue_depth, 0);
}

#[tokio::test]
async fn a_full_read_queue_refuses_at_once_and_drop_answers_the_queued() {
    let dir = Dir::new(&std::env::temp_dir(), "rfull");
    let slow = FlashOptions {
        read_threads: 1,
        read_queue: 2,
        delay: Some(Duration::from_millis(300)),
        ..opts()
    };
    let files = FlashFiles::open(&[dir.spec("ext", SEG as u64)], slow).unwrap();
    // One being read and two queued at most: a later read is refused at once.
    let mut accepted = Vec::new();
    let refused = loop {
        let read = files.read(0, accepted.len() as u32, 1);
        if files.stats().reads_rejected == 1 {
            break read;
        }
        accepted.push(read);
        assert!(accepted.len() <= 3, "the queue holds 2");
    };
    assert!(accepted.len() >= 2);
    assert_eq!(refused.await.unwrap_err().kind(), ErrorKind::WouldBlock);
    // Dropped while the reader sleeps on its first read: the queued ones get an error.
    drop(files);
    let mut closed = 0;
    for read in accepted {
        match read.await {
            Ok(bytes) => assert_eq!(bytes, vec![0], "never written"),
            Err(e) => {
                assert_eq!(e.to_string(), "flash files closed");
                closed += 1;
            }
        }
    }
    assert!(
        closed >= 1,
        "the queued reads are answered with an error on drop"
    );
}

#[test]
fn a_write_callback_may_drop_the_last_reference() {
    let dir = Dir::new(&std::env::temp_dir(), "last");
    let slow = FlashOptions {
        delay: Some(Duration::from_millis(50)),
        ..opts()
    };
    let files = Arc::new(FlashFiles::open(&[dir.spec("ext", SEG as u64)], slow).unwrap());
    let (tx, rx) = mpsc::channel();
    let held = files.clone();
    let done: WriteDone = Box::new(move |result| {
        drop(held); // the last reference: the writer thread runs the drop
        tx.send(result.is_ok()).unwrap();
    });
    assert!(files.try_write(0, pattern(0), done).is_ok());
    drop(files);
    assert!(rx.recv_timeout(Duration::from_secs(10)).unwrap());
}

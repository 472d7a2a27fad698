//! `UringReads` against real files (O_DIRECT in /var/tmp where it exists): the same bytes
//! and errors as the reader threads, many reads in flight at once, futures dropped while
//! their reads are in flight, the ring dropped with reads in flight, and the test delay.

use std::io::ErrorKind;
use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use memfleet_flash::{FlashFiles, FlashOptions, FlashSpec, WriteDone};

const SEG: usize = 64 << 10;
const SEGMENTS: u32 = 8;

struct File(PathBuf);

impl Drop for File {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn file(name: &str) -> File {
    let dir = ["/var/tmp"]
        .iter()
        .map(PathBuf::from)
        .find(|d| d.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    File(dir.join(format!("memfleet-uring-{}-{name}", std::process::id())))
}

fn pattern(phys: u32) -> Arc<[u8]> {
    (0..SEG)
        .map(|i| (i % 251) as u8 ^ (phys as u8).wrapping_mul(37))
        .collect::<Vec<u8>>()
        .into()
}

/// Files of `SEGMENTS` segments, each written with its pattern.
fn written(f: &File, delay: Option<Duration>) -> FlashFiles {
    let spec = FlashSpec {
        path: f.0.clone(),
        size: (SEG as u64) * u64::from(SEGMENTS),
    };
    let files = FlashFiles::open(
        &[spec],
        FlashOptions {
            segment_size: SEG,
            delay,
            ..FlashOptions::default()
        },
    )
    .unwrap();
    for phys in 0..SEGMENTS {
        let (tx, rx) = mpsc::channel();
        let done: WriteDone = Box::new(move |r| tx.send(r).unwrap());
        assert!(files.try_write(phys, pattern(phys), done).is_ok());
        rx.recv_timeout(Duration::from_secs(20)).unwrap().unwrap();
    }
    files
}

/// Runs `f` as a worker does: a current-thread runtime and a `LocalSet`.
fn on_worker<F: std::future::Future<Output = ()>>(f: F) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tokio::task::LocalSet::new().block_on(&rt, f);
}

#[test]
fn ring_reads_return_the_bytes_the_threads_do() {
    let f = file("bytes");
    let files = written(&f, None);
    on_worker(async {
        let ring = match files.uring_reads(64) {
            Ok(ring) => ring,
            Err(e) => {
                eprintln!("skipped: io_uring refused here: {e}");
                return;
            }
        };
        // Unaligned ranges, straddling blocks, whole segments; all in flight together.
        let ranges: Vec<(u32, u32, u32)> = (0..SEGMENTS)
            .flat_map(|p| {
                [
                    (p, 0, 1),
                    (p, 4000, 200),
                    (p, 4095, 2),
                    (p, 100, 9000),
                    (p, 0, SEG as u32),
                    (p, SEG as u32 - 7, 7),
                ]
            })
            .collect();
        let reads: Vec<_> = ranges.iter().map(|&(p, o, l)| ring.read(p, o, l)).collect();
        for ((p, o, l), read) in ranges.iter().zip(reads) {
            let bytes = read.await.unwrap();
            let want = &pattern(*p)[*o as usize..(*o + *l) as usize];
            assert_eq!(bytes, want, "segment {p} {o}+{l}");
            assert_eq!(bytes, files.read_blocking(*p, *o, *l).unwrap());
        }
        // The same checks and errors as the threads.
        let err = ring.read(SEGMENTS, 0, 1).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        let err = ring.read(0, SEG as u32 - 1, 2).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
    });
    assert!(files.stats().reads >= 48);
}

#[test]
fn futures_and_rings_dropped_with_reads_in_flight_are_safe() {
    let f = file("drops");
    let files = written(&f, None);
    on_worker(async {
        let Ok(ring) = files.uring_reads(16) else {
            eprintln!("skipped: io_uring refused here");
            return;
        };
        for round in 0..50u32 {
            // Started, then dropped unpolled or after one poll: their buffers stay the ring's.
            let dropped: Vec<_> = (0..8).map(|i| ring.read(i, 0, SEG as u32)).collect();
            let mut polled = Box::pin(ring.read(round % SEGMENTS, 10, 100));
            let _ = futures_poll_once(polled.as_mut()).await;
            drop(dropped);
            drop(polled);
            // The ring goes on answering.
            let p = round % SEGMENTS;
            assert_eq!(
                ring.read(p, 5, 50).await.unwrap(),
                &pattern(p)[5..55],
                "round {round}"
            );
        }
        // More reads than the ring holds: refused at once (counted), never blocking.
        let many: Vec<_> = (0..40).map(|i| ring.read(i % SEGMENTS, 0, 4096)).collect();
        let mut refused = 0;
        for read in many {
            match read.await {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => refused += 1,
                Err(e) => panic!("{e}"),
            }
        }
        assert!(refused > 0, "16 entries take at most 16 reads at once");
        // The ring itself dropped with reads in flight (its reaper with the LocalSet).
        let _left: Vec<_> = (0..8).map(|i| ring.read(i, 0, SEG as u32)).collect();
    });
    assert!(files.stats().reads_rejected > 0);
}

/// Polls `f` once (so a ring's read is submitted), whatever it says.
async fn futures_poll_once<F: std::future::Future + Unpin>(mut f: F) -> bool {
    std::future::poll_fn(|cx| {
        let ready = std::pin::Pin::new(&mut f).poll(cx).is_ready();
        std::task::Poll::Ready(ready)
    })
    .await
}

#[test]
fn the_test_delay_holds_ring_reads_too() {
    let f = file("delay");
    let files = written(&f, Some(Duration::from_millis(300)));
    on_worker(async {
        let Ok(ring) = files.uring_reads(16) else {
            eprintln!("skipped: io_uring refused here");
            return;
        };
        let started = Instant::now();
        let reads: Vec<_> = (0..8).map(|p| ring.read(p, 0, 512)).collect();
        for (p, read) in reads.into_iter().enumerate() {
            assert_eq!(read.await.unwrap(), &pattern(p as u32)[..512]);
        }
        let took = started.elapsed();
        // One after another they would take 2.4 s.
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_millis(1500),
            "{took:?}: the reads wait their delay together, not one after another"
        );
    });
}

//! The in-memory flash sink and helpers shared by the flash tests (`tests/it/flash.rs`,
//! `tests/it/flash_dump.rs`).

#![allow(dead_code)] // each test file uses its own part

use memfleet_storage::{
    Cache, Clock, Config, Expiry, FlashCandidate, FlashConfig, FlashFetch, FlashSink,
    FlashWriteDone, Handle, Promotion, StoreStatus,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Segments kept in memory; writes done at once, refused, or failed as the test says.
#[derive(Debug, Default)]
pub struct MemSink {
    pub places: u32,
    pub segments: Mutex<HashMap<u32, Vec<u8>>>,
    pub refuse: Mutex<bool>,
    pub fail: Mutex<bool>,
    pub held: Mutex<Vec<FlashWriteDone>>,
    pub hold: Mutex<bool>,
}

impl FlashSink for MemSink {
    fn places(&self) -> u32 {
        self.places
    }
    fn write(
        &self,
        place: u32,
        bytes: Arc<[u8]>,
        done: FlashWriteDone,
    ) -> Result<(), FlashWriteDone> {
        if *self.refuse.lock().unwrap() {
            return Err(done);
        }
        if *self.hold.lock().unwrap() {
            self.segments.lock().unwrap().insert(place, bytes.to_vec());
            self.held.lock().unwrap().push(done);
            return Ok(());
        }
        let ok = !*self.fail.lock().unwrap();
        if ok {
            self.segments.lock().unwrap().insert(place, bytes.to_vec());
        }
        done.finish(ok);
        Ok(())
    }
}

impl MemSink {
    pub fn read(&self, place: u32, offset: u32, len: u32) -> Option<Vec<u8>> {
        let segs = self.segments.lock().unwrap();
        let seg = segs.get(&place)?;
        seg.get(offset as usize..(offset + len) as usize)
            .map(<[u8]>::to_vec)
    }
}

pub const SEGMENT: usize = 64 << 10;

pub fn cache(places: u32, clock: &Clock) -> (Cache, Arc<MemSink>) {
    let sink = Arc::new(MemSink {
        places,
        ..MemSink::default()
    });
    let config = Config::new(8 * SEGMENT)
        .segment_size(SEGMENT)
        .clock(clock.clone())
        .flash(FlashConfig::new(sink.clone()));
    (Cache::new(config).unwrap(), sink)
}

pub fn value_of(i: usize) -> Vec<u8> {
    format!("value-{i}-").repeat(40).into_bytes()
}

/// What a server does for a key before running a command: fetch its flash copy, if any,
/// and promote it. Returns the last promotion's result.
pub fn bring_back(h: &mut Handle, sink: &MemSink, key: &[u8]) -> Option<Promotion> {
    let candidate: FlashCandidate = h.flash_candidate(key)?;
    let mut bytes = match h.flash_fetch(&candidate) {
        FlashFetch::Local(b) => b,
        FlashFetch::Device { place, offset, len } => match sink.read(place, offset, len) {
            Some(b) => b,
            None => {
                h.flash_read_failed(&candidate);
                return None;
            }
        },
        FlashFetch::Gone => return None,
    };
    loop {
        match h.promote(key, &candidate, &bytes) {
            Promotion::NeedMore(n) => {
                let FlashFetch::Device { place, offset, .. } = h.flash_fetch(&candidate) else {
                    panic!("only device reads come back short");
                };
                bytes = sink
                    .read(place, offset, n)
                    .expect("the record is on the device");
            }
            other => return Some(other),
        }
    }
}

pub fn fill(h: &mut Handle, n: usize, expiry: Expiry) {
    for i in 0..n {
        let key = format!("key:{i}");
        assert_eq!(
            h.set(key.as_bytes(), &value_of(i), i as u32, expiry)
                .unwrap(),
            StoreStatus::Stored
        );
    }
}

//! Key dumps with a flash tier: after the table walk, a dump reads each flash segment whole
//! and lists the items there whose keys' slots still point at them: every live item once,
//! in RAM or on flash, with its flags, length and CAS; deleted, overwritten and flushed
//! flash items are left out.

use crate::support::flash_sink;
use flash_sink::{cache, fill, value_of, MemSink};
use memfleet_storage::{Clock, DumpCursor, DumpItem, Expiry, FlashFetch, Handle};
use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Dumped {
    flags: u32,
    value_len: usize,
    cas: u64,
    on_flash: bool,
}

fn record(out: &mut Vec<(String, Dumped)>, item: &DumpItem<'_>) {
    out.push((
        String::from_utf8(item.key().to_vec()).unwrap(),
        Dumped {
            flags: item.flags(),
            value_len: item.value_len(),
            cas: item.cas(),
            on_flash: item.on_flash(),
        },
    ));
}

/// A whole dump as a server runs one; returns the items and the (buffer, device) segment
/// reads it took. `records` is the batch size of each flash step.
fn dump(h: &Handle, sink: &MemSink, records: usize) -> (Vec<(String, Dumped)>, usize, usize) {
    let mut out = Vec::new();
    let mut cursor = DumpCursor::new();
    while !cursor.is_done() {
        h.dump_step(&mut cursor, 64, |item| record(&mut out, item));
    }
    let (mut local, mut device) = (0, 0);
    while let Some((segment, fetch)) = h.flash_dump_next(&mut cursor) {
        let bytes = match fetch {
            FlashFetch::Local(bytes) => {
                local += 1;
                bytes
            }
            FlashFetch::Device { place, offset, len } => {
                device += 1;
                sink.read(place, offset, len).expect("a stored segment")
            }
            FlashFetch::Gone => panic!("a dump is never told a segment is gone"),
        };
        let mut at = 0;
        while !h.flash_dump_step(&segment, &bytes, &mut at, records, |item| {
            record(&mut out, item)
        }) {}
    }
    (out, local, device)
}

#[test]
fn a_dump_lists_every_item_once_in_ram_or_on_flash() {
    let clock = Clock::manual();
    let (cache, sink) = cache(64, &clock);
    let mut h = cache.handle();
    let n = 3000;
    fill(&mut h, n, Expiry::Never);
    let on_flash = |h: &Handle, i: usize| h.flash_candidate(format!("key:{i}").as_bytes());
    // A few flash items deleted or overwritten: they must not be listed from flash.
    let flash_keys: Vec<usize> = (0..n).filter(|&i| on_flash(&h, i).is_some()).collect();
    assert!(flash_keys.len() > 1000, "{}", flash_keys.len());
    for &i in flash_keys.iter().take(10) {
        assert!(h.delete(format!("key:{i}").as_bytes()));
    }
    for &i in flash_keys.iter().skip(10).take(5) {
        h.set(format!("key:{i}").as_bytes(), b"new", 7, Expiry::Never)
            .unwrap();
    }
    // What a get would find: in RAM, or a flash slot of the key.
    let mut expected = HashMap::new();
    for i in 0..n {
        let key = format!("key:{i}");
        if let Some(item) = h.get(key.as_bytes()) {
            expected.insert(key, (item.flags(), item.value().len(), false));
        } else if on_flash(&h, i).is_some() {
            expected.insert(key, (i as u32, value_of(i).len(), true));
        }
    }

    let (listed, local, device) = dump(&h, &sink, 7);
    assert!(device > 10, "whole flash segments read: {device}");
    assert!(local >= 1, "the buffer being filled is listed too");
    let mut seen: HashMap<String, Dumped> = HashMap::new();
    for (key, d) in listed {
        assert!(
            seen.insert(key.clone(), d.clone()).is_none(),
            "{key} listed twice"
        );
        let Some(&(flags, value_len, flash)) = expected.get(&key) else {
            panic!("{key} listed but a get would not find it: {d:?}");
        };
        assert_eq!(
            (d.flags, d.value_len, d.on_flash),
            (flags, value_len, flash),
            "{key}"
        );
    }
    assert_eq!(seen.len(), expected.len(), "every live item listed");
    for &i in flash_keys.iter().take(10) {
        assert!(
            !seen.contains_key(&format!("key:{i}")),
            "deleted key:{i} listed"
        );
    }
    for &i in flash_keys.iter().skip(10).take(5) {
        let d = &seen[&format!("key:{i}")];
        assert!(
            !d.on_flash && d.flags == 7,
            "key:{i} listed from its old copy: {d:?}"
        );
    }

    // The CAS a dump shows is the one a gets returns once the item is read from flash.
    let i = flash_keys[100];
    let key = format!("key:{i}");
    let listed_cas = seen[&key].cas;
    flash_sink::bring_back(&mut h, &sink, key.as_bytes()).expect("promoted");
    assert_eq!(h.get(key.as_bytes()).unwrap().cas(), listed_cas);

    // A batch size of 1 walks the same records.
    let (again, _, _) = dump(&h, &sink, 1);
    assert_eq!(again.len(), seen.len());

    // After a flush, nothing is listed, in RAM or on flash.
    cache.flush_all(0);
    let (after_flush, _, _) = dump(&h, &sink, 64);
    assert!(after_flush.is_empty(), "{} listed", after_flush.len());
}

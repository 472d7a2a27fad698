//! Unit tests of `report.rs`, kept beside it so that the product file
//! holds product code only.

use super::*;

#[test]
fn ratios_are_zero_without_gets_and_exact_otherwise() {
    let mut r = Report {
        cache: "x".into(),
        ..Report::default()
    };
    assert_eq!((r.miss_ratio(), r.byte_miss_ratio()), (0.0, 0.0));
    r.gets = 8;
    r.misses = 2;
    r.get_bytes = 1000;
    r.miss_bytes = 100;
    assert_eq!((r.miss_ratio(), r.byte_miss_ratio()), (0.25, 0.1));
    assert_eq!(
        WindowStats {
            start: 0,
            gets: 4,
            misses: 3
        }
        .miss_ratio(),
        0.75
    );
    assert!(r.summary_line().ends_with(" items=- bytes=-"));
    r.memory_used = Some(4096);
    r.items = Some(12);
    let table = r.to_string();
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().eq(["memory", "used", "(B)", "4096"])),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().eq(["items", "held", "12"])),
        "{table}"
    );
    assert!(r.summary_line().ends_with(" items=12 bytes=4096"));
}

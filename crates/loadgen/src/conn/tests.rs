//! Unit tests of `conn.rs`, kept beside it so that the product file
//! holds product code only.

use super::*;

#[test]
fn stats_count_only_measured_replies_but_every_error() {
    let mut s = Stats::default();
    s.reply(
        WorkloadOp::Get(1),
        CheckedReply::Hit,
        Duration::from_micros(5),
        false,
    );
    s.reply(
        WorkloadOp::Get(1),
        CheckedReply::Wrong("k", "first".into()),
        Duration::ZERO,
        false,
    );
    s.reply(
        WorkloadOp::Get(1),
        CheckedReply::Hit,
        Duration::from_micros(5),
        true,
    );
    s.reply(
        WorkloadOp::Get(2),
        CheckedReply::Miss,
        Duration::from_micros(7),
        true,
    );
    s.reply(
        WorkloadOp::Set(2),
        CheckedReply::Stored,
        Duration::from_micros(9),
        true,
    );
    s.reply(
        WorkloadOp::Set(2),
        CheckedReply::Wrong("k", "second".into()),
        Duration::ZERO,
        true,
    );
    assert_eq!((s.ops, s.gets, s.hits, s.misses, s.sets), (3, 2, 1, 1, 1));
    assert_eq!(s.errors, 2);
    assert_eq!(s.error_kinds["k"], (2, "first".to_string()));
    assert_eq!(s.latency_ns.len(), 3);
    assert_eq!(s.latency_ns.max(), s.latency_ns.highest_equivalent(9000));
}

//! TTL buckets: which segment chain an item goes to, and how precise its expiry is.
//!
//! Segcache (§3.1) indexes segments by approximate TTL in 1024 buckets, split into four groups
//! of 256 whose width grows ×16 from one group to the next. memfleet's groups are contiguous:
//!
//! | group | TTL range (s)          | bucket width | buckets   |
//! |-------|------------------------|--------------|-----------|
//! | 0     | 0 ..= 1 023            | 4 s          | 0..256    |
//! | 1     | 1 024 ..= 17 407       | 64 s         | 256..512  |
//! | 2     | 17 408 ..= 279 551     | 1 024 s      | 512..768  |
//! | 3     | 279 552 ..             | 16 384 s     | 768..1023 |
//!
//! Bucket 1023 holds items that never expire (memcached's exptime 0); TTLs beyond the last
//! group (about 51 days) share bucket 1022. The widths were chosen so that memcached's longest
//! relative TTL (30 days) fits with room to spare while the low end stays fine-grained.
//!
//! The bucket only *groups* items. Expiry itself is exact from above: a segment expires at the
//! earliest deadline of any item in it, so nothing is ever served past its own deadline. What
//! the grouping costs is early expiry, and [`tolerance`] bounds it: a segment accepts an item
//! only while the spread of deadlines in it stays within the bucket's tolerance (1/8 of the
//! bucket's lower bound by default, rounded down: zero below 8 s). The clock ticks in whole
//! seconds, like memcached's, so an item already lives between `ttl - 1` and `ttl` seconds;
//! a tolerance of a whole second on top would let a 2-second item vanish at once, which is
//! why short TTLs get none (their segments then hold one deadline each, and live seconds).

/// Number of TTL buckets.
pub const N_BUCKETS: usize = 1024;
/// The bucket for items without expiry.
pub const NEVER_BUCKET: usize = N_BUCKETS - 1;

const G1_START: u32 = 1024;
const G2_START: u32 = G1_START + 256 * 64;
const G3_START: u32 = G2_START + 256 * 1024;

/// The bucket index for an item with `ttl` seconds left; `None` means "never expires".
#[inline]
pub fn bucket_for(ttl: Option<u32>) -> usize {
    let Some(ttl) = ttl else {
        return NEVER_BUCKET;
    };
    if ttl < G1_START {
        (ttl >> 2) as usize
    } else if ttl < G2_START {
        256 + ((ttl - G1_START) >> 6) as usize
    } else if ttl < G3_START {
        512 + ((ttl - G2_START) >> 10) as usize
    } else {
        768 + (((ttl - G3_START) >> 14) as usize).min(254)
    }
}

/// The smallest TTL that maps to `bucket` (its "approximate TTL" in the paper's words).
pub fn lower_bound(bucket: usize) -> u32 {
    let b = bucket as u32;
    match bucket {
        0..=255 => b << 2,
        256..=511 => G1_START + ((b - 256) << 6),
        512..=767 => G2_START + ((b - 512) << 10),
        768..=1022 => G3_START + ((b - 768) << 14),
        _ => u32::MAX,
    }
}

/// The default precision: deadlines in a segment may spread over 1/2^3 of the bucket's TTL.
pub const DEFAULT_PRECISION_SHIFT: u32 = 3;

/// How far apart, in seconds, the deadlines inside one segment of `bucket` may be, with a
/// precision of 1/2^`shift` of the bucket's lower bound, rounded down. An item is therefore
/// served at least until `deadline - tolerance`.
pub fn tolerance_with(bucket: usize, shift: u32) -> u32 {
    if bucket == NEVER_BUCKET {
        return 0;
    }
    lower_bound(bucket) >> shift
}

/// The most an item written with `ttl` seconds (0: never expires) may expire early, given the
/// cache's `expiry_precision_shift`, as long as no merge eviction moved it.
///
/// Read-modify-write operations (incr, decr, append, prepend) keep the deadline they can see,
/// which for an item written by a plain set is its segment's earliest deadline: the first
/// rewrite may therefore cost up to one more tolerance. From then on the item carries its own
/// exact deadline, so further rewrites cost nothing more.
pub fn early_expiry_bound(ttl: u32, shift: u32) -> u32 {
    let bucket = bucket_for((ttl != 0).then_some(ttl));
    tolerance_with(bucket, shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_cover_every_ttl() {
        let mut last = 0;
        for ttl in (0..5_000_000u32).step_by(7) {
            let b = bucket_for(Some(ttl));
            assert!(b >= last, "ttl {ttl}");
            assert!(b < NEVER_BUCKET);
            assert!(lower_bound(b) <= ttl, "ttl {ttl} bucket {b}");
            last = b;
        }
        assert_eq!(bucket_for(None), NEVER_BUCKET);
    }

    #[test]
    fn group_boundaries() {
        assert_eq!(bucket_for(Some(0)), 0);
        assert_eq!(bucket_for(Some(3)), 0);
        assert_eq!(bucket_for(Some(4)), 1);
        assert_eq!(bucket_for(Some(1023)), 255);
        assert_eq!(bucket_for(Some(1024)), 256);
        assert_eq!(bucket_for(Some(G2_START - 1)), 511);
        assert_eq!(bucket_for(Some(G2_START)), 512);
        assert_eq!(bucket_for(Some(G3_START)), 768);
        // 30 days, memcached's longest relative TTL, is inside group 3 with room to spare.
        assert!(bucket_for(Some(30 * 86_400)) < 1022);
        assert_eq!(bucket_for(Some(u32::MAX)), 1022);
        for b in 0..NEVER_BUCKET {
            assert_eq!(bucket_for(Some(lower_bound(b))), b);
        }
    }

    #[test]
    fn tolerance_is_a_fraction_of_the_ttl_rounded_down() {
        assert_eq!(tolerance_with(0, 4), 0);
        assert_eq!(tolerance_with(bucket_for(Some(7)), 3), 0);
        assert_eq!(tolerance_with(bucket_for(Some(8)), 3), 1);
        assert_eq!(tolerance_with(bucket_for(Some(10)), 4), 0);
        assert_eq!(tolerance_with(bucket_for(Some(60)), 4), 3);
        assert_eq!(tolerance_with(bucket_for(Some(3600)), 4), 3584 / 16);
        assert_eq!(early_expiry_bound(3600, DEFAULT_PRECISION_SHIFT), 3584 / 8);
        assert_eq!(tolerance_with(NEVER_BUCKET, 3), 0);
    }
}

//! Unit tests of `workload.rs`, kept beside it so that the product file
//! holds product code only.

use super::*;

#[test]
fn keys_are_decimal_and_round_trip() {
    for n in [0, 7, 10, 99_999, u64::MAX] {
        let mut out = Vec::new();
        push_key(n, &mut out);
        assert_eq!(out, format!("key:{n}").into_bytes());
        assert_eq!(parse_key(&out), Some(n));
    }
    assert_eq!(parse_key(b"key:007"), None);
    assert_eq!(parse_key(b"key:"), None);
    assert_eq!(parse_key(b"key:1x"), None);
    assert_eq!(parse_key(b"kee:1"), None);
    assert_eq!(parse_key(b"key:18446744073709551616"), None);
}

#[test]
fn requests_are_memcached_text() {
    let w = Workload::new(100, 0.9, 10, None).unwrap();
    let mut out = Vec::new();
    w.encode(WorkloadOp::Get(42), &mut out);
    w.encode(WorkloadOp::Set(1), &mut out);
    assert_eq!(
        out,
        b"get key:42\r\nset key:1 0 0 10\r\nbcdefghijk\r\n".as_slice()
    );
}

#[test]
fn values_depend_on_the_key_and_have_the_right_size() {
    let w = Workload::new(1000, 0.9, 100, None).unwrap();
    assert_eq!(w.value(3).len(), 100);
    assert_eq!(w.value(3), w.value(3 + VALUE_SHIFTS));
    assert_ne!(w.value(3), w.value(4));
    assert!(w.value(5).iter().all(|b| b.is_ascii_alphanumeric()));
}

#[test]
fn keys_stay_in_range_and_the_mix_holds() {
    for zipf in [None, Some(0.99)] {
        let w = Workload::new(1000, 0.9, 100, zipf).unwrap();
        let mut rng = conn_rng(1, 0);
        let mut gets = 0;
        let mut seen = vec![false; 1000];
        for _ in 0..100_000 {
            let op = w.op(&mut rng);
            assert!(op.key() < 1000);
            seen[op.key() as usize] = true;
            gets += matches!(op, WorkloadOp::Get(_)) as u32;
        }
        assert!((89_000..91_000).contains(&gets), "{gets} gets");
        assert!(seen[0], "key:0 never drawn");
        if zipf.is_none() {
            assert!(seen.iter().all(|&s| s), "uniform missed a key");
        }
    }
}

#[test]
fn zipf_favours_low_keys() {
    let w = Workload::new(100_000, 1.0, 100, Some(1.0)).unwrap();
    let mut rng = conn_rng(3, 1);
    let low = (0..10_000).filter(|_| w.key(&mut rng) < 10).count();
    // Zipf(1) over 100k keys puts ~24% of the mass on the top 10.
    assert!((1_800..3_000).contains(&low), "{low}");
}

fn spec(protocol: Protocol) -> WorkloadSpec {
    WorkloadSpec {
        keys: 1000,
        mix: Mix::new(0.5, 0.3, 0.2).unwrap(),
        zipf: None,
        key_sizes: Some(SizeDistribution::Uniform { min: 8, max: 40 }),
        value_sizes: SizeDistribution::Uniform { min: 1, max: 500 },
        ttl: "60:0.5,0:0.5".parse().unwrap(),
        protocol,
    }
}

#[test]
fn padded_keys_are_unique_valid_and_deterministic() {
    let w = Workload::from_spec(spec(Protocol::Text)).unwrap();
    let mut seen = std::collections::HashSet::new();
    let mut lengths = std::collections::HashSet::new();
    for n in 0..1000 {
        let mut k = Vec::new();
        w.push_key_bytes(n, &mut k);
        let natural = format!("key:{n}");
        assert!(k.starts_with(natural.as_bytes()));
        assert!(k.len() >= natural.len() && k.len() <= 40, "{k:?}");
        assert!(k.iter().all(|b| b.is_ascii_graphic()));
        if k.len() > natural.len() {
            assert_eq!(k[natural.len()], KEY_PAD_SEPARATOR);
        }
        assert!(w.key_matches(n, &k));
        assert!(!w.key_matches(n + 1, &k));
        assert!(!w.key_matches(n, &k[..k.len() - 1]));
        let mut again = Vec::new();
        w.push_key_bytes(n, &mut again);
        assert_eq!(k, again);
        lengths.insert(k.len());
        assert!(seen.insert(k));
    }
    assert!(lengths.len() > 20, "sizes do not vary: {lengths:?}");
}

#[test]
fn sizes_and_ttls_are_per_key() {
    let w = Workload::from_spec(spec(Protocol::Text)).unwrap();
    let sizes: Vec<usize> = (0..1000).map(|n| w.value(n).len()).collect();
    assert!(sizes.iter().all(|s| (1..=500).contains(s)));
    assert_eq!(w.value(17), w.value(17));
    let expiring = (0..1000).filter(|&n| w.ttl(n) == 60).count();
    assert!((400..600).contains(&expiring), "{expiring}");
    assert!((0..1000).all(|n| [0, 60].contains(&w.ttl(n))));
}

#[test]
fn the_mix_holds_deletes() {
    let w = Workload::from_spec(spec(Protocol::Text)).unwrap();
    let mut rng = conn_rng(2, 0);
    let mut counts = [0u32; 3];
    for _ in 0..100_000 {
        counts[match w.op(&mut rng) {
            WorkloadOp::Get(_) => 0,
            WorkloadOp::Set(_) => 1,
            WorkloadOp::Delete(_) => 2,
        }] += 1;
    }
    assert!((49_000..51_000).contains(&counts[0]), "{counts:?}");
    assert!((29_000..31_000).contains(&counts[1]), "{counts:?}");
    assert!((19_000..21_000).contains(&counts[2]), "{counts:?}");
    assert_eq!(
        "get=0.8, set=0.15,delete=0.05"
            .parse::<Mix>()
            .unwrap()
            .delete,
        0.05
    );
    assert!("get=0.8".parse::<Mix>().is_err());
    assert!("get=0.8,put=0.2".parse::<Mix>().is_err());
    assert!(Mix::from_ratios(0.9, 0.2).is_err());
    assert!((Mix::from_ratios(0.9, 0.05).unwrap().set - 0.05).abs() < 1e-12);
}

#[test]
fn requests_in_both_protocols_carry_ttls() {
    let mut s = spec(Protocol::Text);
    s.key_sizes = None;
    s.value_sizes = SizeDistribution::Fixed(3);
    s.ttl = TtlMix::single(120);
    let text = Workload::from_spec(s.clone()).unwrap();
    let mut out = Vec::new();
    text.encode(WorkloadOp::Set(5), &mut out);
    text.encode(WorkloadOp::Delete(5), &mut out);
    assert_eq!(
        out,
        b"set key:5 0 120 3\r\nfgh\r\ndelete key:5\r\n".as_slice()
    );
    s.protocol = Protocol::Meta;
    let meta = Workload::from_spec(s.clone()).unwrap();
    out.clear();
    meta.encode(WorkloadOp::Get(5), &mut out);
    meta.encode(WorkloadOp::Set(5), &mut out);
    meta.encode(WorkloadOp::Delete(5), &mut out);
    assert_eq!(
        out,
        b"mg key:5 k f v\r\nms key:5 3 T120\r\nfgh\r\nmd key:5\r\n".as_slice()
    );
    s.ttl = TtlMix::single(0);
    out.clear();
    Workload::from_spec(s)
        .unwrap()
        .encode(WorkloadOp::Set(5), &mut out);
    assert_eq!(out, b"ms key:5 3\r\nfgh\r\n".as_slice());
}

#[test]
fn bad_parameters_are_refused() {
    assert!(Workload::new(0, 0.9, 100, None).is_err());
    assert!(Workload::new(10, 1.5, 100, None).is_err());
    assert!(Workload::new(10, 0.9, 100, Some(-1.0)).is_err());
}

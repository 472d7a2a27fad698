//! The hashing vectors in `tests/vectors/ketama/` (copied from the project's shared test
//! data, `../shared/vectors/ketama/`, so a clone on its own runs them), produced by the real
//! libraries (spymemcached 2.12.3, libmemcached 1.1.4, pymemcache 4.0.0; their README says
//! how): every key must go to the server the library picked.

use memfleet_routing::{Distribution, KetamaDialect, KeyHash, Node, Ring};
use std::path::PathBuf;

fn vectors(file: &str) -> Vec<(String, String)> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/vectors/ketama")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let rows: Vec<(String, String)> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (key, server) = l.split_once('\t').expect("key<TAB>host:port");
            (key.to_string(), server.to_string())
        })
        .collect();
    assert_eq!(rows.len(), 100, "{file}");
    rows
}

fn check(file: &str, distribution: Distribution) {
    let nodes = (11211..11215).map(|p| Node::new("127.0.0.1", p)).collect();
    let ring = Ring::new(nodes, distribution, KeyHash::Md5).unwrap();
    let wrong: Vec<String> = vectors(file)
        .into_iter()
        .filter_map(|(key, want)| {
            let got = ring.nodes()[ring.pick(key.as_bytes())].addr();
            (got != want).then(|| format!("{key}: {got}, library says {want}"))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{file}: {} of 100 differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn libmemcached_ketama() {
    check(
        "libmemcached_ketama_vectors.txt",
        Distribution::Ketama(KetamaDialect::Libmemcached),
    );
}

#[test]
fn spymemcached_ketama() {
    check(
        "spymemcached_ketama_vectors.txt",
        Distribution::Ketama(KetamaDialect::Spymemcached),
    );
}

#[test]
fn pymemcache_rendezvous() {
    check(
        "pymemcache_rendezvous_vectors.txt",
        Distribution::Rendezvous,
    );
}

#[test]
fn the_dialects_really_differ() {
    // About a third of the keys move between the two ketama dialects: the node string.
    let nodes: Vec<Node> = (11211..11215).map(|p| Node::new("127.0.0.1", p)).collect();
    let lib = Ring::new(
        nodes.clone(),
        Distribution::Ketama(KetamaDialect::Libmemcached),
        KeyHash::Md5,
    )
    .unwrap();
    let spy = Ring::new(
        nodes,
        Distribution::Ketama(KetamaDialect::Spymemcached),
        KeyHash::Md5,
    )
    .unwrap();
    let moved = (0..100)
        .filter(|i| {
            let k = format!("key{i}");
            lib.pick(k.as_bytes()) != spy.pick(k.as_bytes())
        })
        .count();
    assert!((15..60).contains(&moved), "{moved}");
}

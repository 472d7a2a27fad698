//! Choosing a server for a key: the distributions deployments already use, so that a pool
//! moved behind memfleet keeps every key on the server that holds it.
//!
//! * **Ketama** (libketama's consistent hashing): each server gets points on a 32-bit ring
//!   from MD5 digests of a *node string*; a key goes to the first point at or after its hash,
//!   wrapping around. Dialects differ in the node string and the point count, and a key hashed
//!   with one dialect's ring lands elsewhere on another's — Flickr had to patch a proxy to move
//!   between two of them; here it is [`KetamaDialect`]:
//!   - `Libmemcached` (also twemproxy and libketama): node string `host` when the port is
//!     11211, else `host:port`, or the server's name when it has one (twemproxy's `name`);
//!     points per server `floor(weight share × 40 × servers + 1e-10) × 4`.
//!   - `Spymemcached`: node string `host:port` always, 160 points whatever the weight.
//! * **Modula**: `hash % total weight`, each server owning as many slots as its weight
//!   (twemproxy's `modula`).
//! * **Rendezvous** (pymemcache's `HashClient` default): the server with the highest
//!   murmur3 score of `"host:port-key"`.
//! * **Jump** (Lamping and Veach's jump consistent hash): no ring, minimal movement when
//!   servers are added at the end; memfleet's own choice for new pools.
//! * **Random** (twemproxy's `random`): any server, uniformly, weights ignored, for each
//!   request anew. Only useful for pools where any copy will do (twemproxy users have them
//!   for read-mostly replicas kept in sync elsewhere); a key has no home.
//!
//! A pool that ejects failing servers (twemproxy's `auto_eject_hosts`) routes by a *live*
//! ring, [`Ring::without`] its ejected servers, built as twemproxy rebuilds its continuum:
//! ketama's points and modula's slots come from the live servers alone (weight shares
//! recomputed over them), random draws among them. Rendezvous and jump (not twemproxy's)
//! move only the ejected servers' keys: rendezvous takes the best live score, jump rehashes
//! a key whose server is out over the live ones.

use crate::hash::{md5_u32, murmur3_32, KeyHash};

/// One server as a distribution sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// Host name or address, as configured (not resolved: it is hashed as written).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Relative weight (at least 1).
    pub weight: u32,
    /// A name to hash instead of the address (twemproxy's `host:port:weight name`), so
    /// that a server can move to another address and keep its keys.
    pub name: Option<String>,
}

impl Node {
    /// A node of weight 1 without a name.
    pub fn new(host: &str, port: u16) -> Node {
        Node {
            host: host.to_string(),
            port,
            weight: 1,
            name: None,
        }
    }

    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// Which ketama.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KetamaDialect {
    /// libmemcached, twemproxy, libketama.
    Libmemcached,
    /// spymemcached (and uhashring's ketama mode).
    Spymemcached,
}

/// How keys are spread over the servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Distribution {
    /// Consistent hashing on a ring of MD5 points.
    Ketama(KetamaDialect),
    /// `hash % total weight`.
    Modula,
    /// Highest murmur3 score (pymemcache).
    Rendezvous,
    /// Jump consistent hash.
    Jump,
    /// A uniformly random server per request (twemproxy's `random`).
    Random,
}

/// Why servers cannot be distributed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// No servers.
    #[error("a pool needs at least one server")]
    Empty,
    /// A weight of zero.
    #[error("server {0} has weight 0")]
    ZeroWeight(String),
}

/// Servers arranged for one distribution and key hash: answers "which server" for a key.
#[derive(Clone, Debug)]
pub struct Ring {
    distribution: Distribution,
    key_hash: KeyHash,
    nodes: Vec<Node>,
    /// Ketama: (point, server) sorted by point. Modula: one slot per unit of weight.
    points: Vec<(u32, u32)>,
    /// twemproxy's `hash_tag`.
    hash_tag: Option<[u8; 2]>,
    /// The servers [`Ring::pick`] may return, ascending: all of them, or those a live ring
    /// ([`Ring::without`]) keeps.
    live: Vec<u32>,
}

/// Ketama points per server in libmemcached's weighted formula (40 digests of 4 points).
const POINTS_PER_SERVER: f32 = 160.0;

impl Ring {
    /// Arranges `nodes`. The key hash matters for ketama and modula (twemproxy lets a pool
    /// pair any hash with them; libmemcached and spymemcached use md5); rendezvous always
    /// uses murmur3 and jump its own 64-bit hash.
    pub fn new(
        nodes: Vec<Node>,
        distribution: Distribution,
        key_hash: KeyHash,
    ) -> Result<Ring, RingError> {
        if nodes.is_empty() {
            return Err(RingError::Empty);
        }
        if let Some(n) = nodes.iter().find(|n| n.weight == 0) {
            return Err(RingError::ZeroWeight(n.addr()));
        }
        let live: Vec<u32> = (0..nodes.len() as u32).collect();
        let points = arrange(&nodes, &live, distribution);
        Ok(Ring {
            distribution,
            key_hash,
            nodes,
            points,
            hash_tag: None,
            live,
        })
    }

    /// The live ring of a pool whose servers `ejected` (indexes, in any order) are out:
    /// the same servers and indexes, but [`Ring::pick`] never returns an ejected one (see
    /// the module's description for how each distribution rehashes). `None` when every
    /// server is ejected.
    pub fn without(&self, ejected: &[usize]) -> Option<Ring> {
        let live: Vec<u32> = (0..self.nodes.len() as u32)
            .filter(|i| !ejected.contains(&(*i as usize)))
            .collect();
        if live.is_empty() {
            return None;
        }
        Some(Ring {
            points: arrange(&self.nodes, &live, self.distribution),
            live,
            ..self.clone()
        })
    }

    /// Whether [`Ring::pick`] may return server `index` (false for an ejected server of a
    /// live ring).
    pub fn is_live(&self, index: usize) -> bool {
        self.live.binary_search(&(index as u32)).is_ok()
    }

    /// Hashes only the part of a key between the two tag characters when the key has both
    /// with something between them (twemproxy's `hash_tag: "{}"`: `user:{42}:name` and
    /// `user:{42}:mail` land together); other keys are hashed whole.
    pub fn with_hash_tag(mut self, tag: Option<[u8; 2]>) -> Ring {
        self.hash_tag = tag;
        self
    }

    fn hashed_part<'k>(&self, key: &'k [u8]) -> &'k [u8] {
        let Some([open, close]) = self.hash_tag else {
            return key;
        };
        let Some(start) = key.iter().position(|&b| b == open) else {
            return key;
        };
        match key[start + 1..].iter().position(|&b| b == close) {
            Some(len) if len > 0 => &key[start + 1..start + 1 + len],
            _ => key,
        }
    }

    /// The servers, in configuration order (indexes returned by [`Ring::pick`]).
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The index of the server that holds `key`.
    pub fn pick(&self, key: &[u8]) -> usize {
        let key = self.hashed_part(key);
        match self.distribution {
            Distribution::Random => self.live[random_below(self.live.len())] as usize,
            Distribution::Ketama(_) => {
                let h = self.key_hash.hash(key);
                let at = self.points.partition_point(|&(p, _)| p < h);
                let (_, server) = self.points.get(at).unwrap_or(&self.points[0]);
                *server as usize
            }
            Distribution::Modula => {
                let h = self.key_hash.hash(key);
                self.points[h as usize % self.points.len()].1 as usize
            }
            Distribution::Rendezvous => {
                let mut best: Option<(u32, usize)> = None;
                for &i in &self.live {
                    let (i, n) = (i as usize, &self.nodes[i as usize]);
                    let mut text = n.addr().into_bytes();
                    text.push(b'-');
                    text.extend_from_slice(key);
                    let score = murmur3_32(&text, 0);
                    // pymemcache breaks a tie by the larger node string.
                    let better = match best {
                        None => true,
                        Some((s, j)) => {
                            score > s || (score == s && n.addr() > self.nodes[j].addr())
                        }
                    };
                    if better {
                        best = Some((score, i));
                    }
                }
                best.expect("a ring has servers").1
            }
            Distribution::Jump => {
                let server = jump(xxhash_rust::xxh3::xxh3_64(key), self.nodes.len() as u32);
                if self.live.len() == self.nodes.len() || self.is_live(server as usize) {
                    return server as usize;
                }
                // Out: another hash of the key, over the live servers.
                let again = xxhash_rust::xxh3::xxh3_64_with_seed(key, u64::from(server) + 1);
                self.live[jump(again, self.live.len() as u32) as usize] as usize
            }
        }
    }
}

/// Ketama points or modula slots of the servers `live` (indexes into `nodes`, ascending).
fn arrange(nodes: &[Node], live: &[u32], distribution: Distribution) -> Vec<(u32, u32)> {
    match distribution {
        Distribution::Ketama(dialect) => ketama_points(nodes, live, dialect),
        Distribution::Modula => live
            .iter()
            .flat_map(|&i| std::iter::repeat_n((0, i), nodes[i as usize].weight as usize))
            .collect(),
        Distribution::Rendezvous | Distribution::Jump | Distribution::Random => Vec::new(),
    }
}

/// Puts `nodes` in the order twemproxy keeps a pool's servers: it sorts them by name when
/// it loads its configuration (the name is the ketama node string: the configured name,
/// else `host`, or `host:port` when the port is not 11211), shorter names first, then byte
/// by byte. Order does not move keys on a ketama ring, but modula picks by position, so a
/// twemproxy pool read from its YAML file must be sorted so to keep its keys in place.
pub fn twemproxy_order(nodes: &mut [Node]) {
    nodes.sort_by_cached_key(|n| {
        let name = node_string(n, KetamaDialect::Libmemcached);
        (name.len(), name.into_bytes())
    });
}

/// The node string a ketama dialect hashes for `node`.
fn node_string(node: &Node, dialect: KetamaDialect) -> String {
    match (dialect, &node.name) {
        (KetamaDialect::Libmemcached, Some(name)) => name.clone(),
        // libmemcached drops the default port to stay compatible with libketama's rings.
        (KetamaDialect::Libmemcached, None) if node.port == 11211 => node.host.clone(),
        _ => node.addr(),
    }
}

/// The ketama points of the servers `live` (all of them, or those twemproxy's
/// `auto_eject_hosts` has not ejected: weight shares and the server count are the live
/// servers', as twemproxy computes them when it rebuilds its continuum).
fn ketama_points(nodes: &[Node], live: &[u32], dialect: KetamaDialect) -> Vec<(u32, u32)> {
    let total: u64 = live
        .iter()
        .map(|&i| u64::from(nodes[i as usize].weight))
        .sum();
    let count = live.len() as f32;
    let mut points = Vec::new();
    for &i in live {
        let node = &nodes[i as usize];
        let per_server = match dialect {
            KetamaDialect::Spymemcached => 160,
            KetamaDialect::Libmemcached => {
                // twemproxy's arithmetic, single precision like the C (a double here would
                // give another count for some weights).
                let share = node.weight as f32 / total as f32;
                let quarter = share * POINTS_PER_SERVER / 4.0 * count;
                ((f64::from(quarter) + 0.000_000_000_1).floor() as u32) * 4
            }
        };
        let name = node_string(node, dialect);
        for digest in 0..per_server / 4 {
            let text = format!("{name}-{digest}");
            for word in 0..4 {
                points.push((md5_u32(text.as_bytes(), word), i));
            }
        }
    }
    // By point, then server: deterministic where the C libraries' qsort is not (a tie
    // between two servers' points is a 1-in-10^5 event for a handful of servers).
    points.sort_unstable();
    points
}

/// Lamping and Veach's jump consistent hash: a bucket in `0..buckets` for `key`.
pub fn jump(mut key: u64, buckets: u32) -> u32 {
    let (mut b, mut j): (i64, i64) = (-1, 0);
    while j < i64::from(buckets) {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    b as u32
}

/// A uniformly distributed index below `n` (> 0), from a per-thread xorshift64* generator
/// seeded from the standard library's per-process random hasher keys: routing needs spread,
/// not secrecy, and a lock-free thread-local costs a few nanoseconds.
fn random_below(n: usize) -> usize {
    use std::cell::Cell;
    use std::hash::{BuildHasher, Hasher};
    thread_local! {
        static STATE: Cell<u64> = Cell::new(
            std::collections::hash_map::RandomState::new().build_hasher().finish() | 1,
        );
    }
    let x = STATE.with(|state| {
        let mut x = state.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    });
    // Multiply-shift maps the 64-bit value onto 0..n without modulo bias worth measuring.
    ((u128::from(x) * n as u128) >> 64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn four() -> Vec<Node> {
        (11211..11215).map(|p| Node::new("127.0.0.1", p)).collect()
    }

    /// A libmemcached ketama ring of `nodes`.
    fn libmemcached(nodes: Vec<Node>, hash: KeyHash) -> Ring {
        Ring::new(
            nodes,
            Distribution::Ketama(KetamaDialect::Libmemcached),
            hash,
        )
        .unwrap()
    }

    #[test]
    fn libmemcached_drops_the_default_port_and_gives_160_points() {
        let ring = libmemcached(four(), KeyHash::Md5);
        assert_eq!(ring.points.len(), 4 * 160);
        assert_eq!(
            node_string(&ring.nodes[0], KetamaDialect::Libmemcached),
            "127.0.0.1"
        );
        assert_eq!(
            node_string(&ring.nodes[1], KetamaDialect::Libmemcached),
            "127.0.0.1:11212"
        );
        assert_eq!(
            node_string(&ring.nodes[0], KetamaDialect::Spymemcached),
            "127.0.0.1:11211"
        );
    }

    #[test]
    fn weights_scale_ketama_points_and_modula_slots() {
        let mut nodes = four();
        nodes[0].weight = 3;
        let ring = libmemcached(nodes.clone(), KeyHash::Md5);
        let of = |s: u32| ring.points.iter().filter(|p| p.1 == s).count();
        // share 3/6 of 4 servers: floor(0.5 * 40 * 4) * 4 = 320; 1/6: floor(26.67) * 4 = 104.
        assert_eq!((of(0), of(1)), (320, 104));
        let modula = Ring::new(nodes, Distribution::Modula, KeyHash::Fnv1a64).unwrap();
        assert_eq!(modula.points.len(), 6);
        let spy = Ring::new(
            four(),
            Distribution::Ketama(KetamaDialect::Spymemcached),
            KeyHash::Md5,
        )
        .unwrap();
        assert_eq!(spy.points.len(), 640);
    }

    #[test]
    fn jump_moves_only_what_it_must() {
        // Growing from 10 to 11 buckets moves about 1/11 of the keys, all to the new one.
        let mut moved = 0;
        for k in 0..10_000u64 {
            let key = xxhash_rust::xxh3::xxh3_64(&k.to_le_bytes());
            let (a, b) = (jump(key, 10), jump(key, 11));
            assert!(a < 10 && b < 11);
            if a != b {
                assert_eq!(b, 10);
                moved += 1;
            }
        }
        assert!((700..1200).contains(&moved), "{moved}");
    }

    #[test]
    fn twemproxy_sorts_by_name_length_then_bytes() {
        let mut nodes = vec![
            Node::new("10.0.0.2", 11212),
            Node::new("10.0.0.10", 11211),
            Node::new("10.0.0.1", 11211),
            Node::new("10.0.0.1", 11213),
        ];
        twemproxy_order(&mut nodes);
        let names: Vec<String> = nodes
            .iter()
            .map(|n| node_string(n, KetamaDialect::Libmemcached))
            .collect();
        assert_eq!(
            names,
            ["10.0.0.1", "10.0.0.10", "10.0.0.1:11213", "10.0.0.2:11212"]
        );
    }

    #[test]
    fn hash_tags_keep_related_keys_together() {
        let nodes: Vec<Node> = (0..8).map(|i| Node::new("10.0.0.1", 20_000 + i)).collect();
        let ring = libmemcached(nodes, KeyHash::Fnv1a64).with_hash_tag(Some(*b"{}"));
        for user in 0..50 {
            let a = ring.pick(format!("user:{{{user}}}:name").as_bytes());
            let b = ring.pick(format!("user:{{{user}}}:mail").as_bytes());
            assert_eq!(a, b);
            assert_eq!(a, ring.pick(format!("{user}").as_bytes()));
        }
        // No tag, an empty tag or an unclosed one: the whole key.
        assert_eq!(ring.hashed_part(b"plain"), b"plain");
        assert_eq!(ring.hashed_part(b"a{}b"), b"a{}b");
        assert_eq!(ring.hashed_part(b"a{b"), b"a{b");
    }

    #[test]
    fn bad_pools_are_refused() {
        assert_eq!(
            Ring::new(vec![], Distribution::Jump, KeyHash::Md5).unwrap_err(),
            RingError::Empty
        );
        let mut nodes = four();
        nodes[2].weight = 0;
        assert!(matches!(
            Ring::new(nodes, Distribution::Modula, KeyHash::Md5),
            Err(RingError::ZeroWeight(_))
        ));
    }

    fn keys() -> Vec<String> {
        (0..5_000).map(|i| format!("key:{i}")).collect()
    }

    #[test]
    fn a_ketama_live_ring_moves_only_the_ejected_servers_keys() {
        let ring = libmemcached(four(), KeyHash::Fnv1a64);
        let live = ring.without(&[2]).unwrap();
        // Equal weights: the same points, less the ejected server's (twemproxy's rebuild).
        let kept: Vec<_> = ring.points.iter().filter(|p| p.1 != 2).copied().collect();
        assert_eq!(live.points, kept);
        assert!(!live.is_live(2) && live.is_live(3));
        let mut moved = [0usize; 4];
        for k in keys() {
            let (before, after) = (ring.pick(k.as_bytes()), live.pick(k.as_bytes()));
            assert_ne!(after, 2, "{k} still goes to the ejected server");
            if before == 2 {
                moved[after] += 1;
            } else {
                assert_eq!(before, after, "{k} moved off a live server");
            }
        }
        // The ejected server's quarter spreads over the three others.
        let total: usize = moved.iter().sum();
        assert!((900..1600).contains(&total), "{moved:?}");
        assert!(
            moved.iter().enumerate().all(|(i, m)| i == 2 || *m > 100),
            "{moved:?}"
        );
    }

    #[test]
    fn ketama_and_modula_live_rings_are_rings_of_the_live_servers_alone() {
        // As twemproxy rebuilds its continuum: weight shares over the live servers.
        let mut nodes = four();
        for (n, w) in nodes.iter_mut().zip([3, 1, 2, 5]) {
            n.weight = w;
        }
        for distribution in [
            Distribution::Ketama(KetamaDialect::Libmemcached),
            Distribution::Ketama(KetamaDialect::Spymemcached),
            Distribution::Modula,
        ] {
            let ring = Ring::new(nodes.clone(), distribution, KeyHash::Md5).unwrap();
            let live = ring.without(&[3, 1]).unwrap();
            let alone = Ring::new(
                vec![nodes[0].clone(), nodes[2].clone()],
                distribution,
                KeyHash::Md5,
            )
            .unwrap();
            for k in keys() {
                let server = &ring.nodes()[live.pick(k.as_bytes())];
                assert_eq!(server, &alone.nodes()[alone.pick(k.as_bytes())], "{k}");
            }
            // Back to full: the original placement.
            let all = ring.without(&[]).unwrap();
            assert!(keys()
                .iter()
                .all(|k| all.pick(k.as_bytes()) == ring.pick(k.as_bytes())));
        }
    }

    #[test]
    fn rendezvous_jump_and_random_live_rings_avoid_the_ejected_server() {
        for distribution in [
            Distribution::Rendezvous,
            Distribution::Jump,
            Distribution::Random,
        ] {
            let ring = Ring::new(four(), distribution, KeyHash::Md5).unwrap();
            let live = ring.without(&[1]).unwrap();
            let mut landed = [0usize; 4];
            for k in keys() {
                let after = live.pick(k.as_bytes());
                landed[after] += 1;
                if distribution != Distribution::Random {
                    let before = ring.pick(k.as_bytes());
                    assert!(
                        before == 1 || before == after,
                        "{distribution:?}: {k} moved"
                    );
                }
            }
            assert_eq!(landed[1], 0, "{distribution:?}");
            assert!(
                [0, 2, 3].iter().all(|&i| landed[i] > 1_200),
                "{distribution:?}: {landed:?}"
            );
        }
        let ring = Ring::new(four(), Distribution::Jump, KeyHash::Md5).unwrap();
        assert!(ring.without(&[0, 1, 2, 3]).is_none());
    }

    #[test]
    fn random_spreads_requests_over_every_server_whatever_the_key() {
        let nodes = (0..4)
            .map(|i| Node {
                weight: 1 + u32::from(i) * 10,
                ..Node::new("10.0.0.1", 11211 + i)
            })
            .collect();
        let ring = Ring::new(nodes, Distribution::Random, KeyHash::Md5).unwrap();
        let mut counts = [0usize; 4];
        for _ in 0..40_000 {
            counts[ring.pick(b"same-key")] += 1;
        }
        // Uniform, weights ignored (as twemproxy's random): each near 10,000.
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
    }
}

//! Where keys live before and after a replacement, and how many moved: for a sample of key
//! names (`key:0` ...), the member the router sends each to (`__memfleet__.route(KEY)`, 100
//! keys per `get`; through the gutter route the main pool's member comes first) and the
//! member the ring computed here from the same configuration and the member names says
//! (`memfleet_routing::PoolConfig::ring_of`: ketama, as the router's pool). The two must
//! agree key for key. Not here: changing the members (`fleet`).

use anyhow::{Context, Result};
use memfleet_routing::{Node, PoolConfig};
use serde_json::json;

use super::fleet::Admin;

/// Keys in the sample.
pub(super) const SAMPLE: u64 = 20_000;

/// The sample's key names: `key:0` .. `key:<SAMPLE-1>`, as the clients name them.
pub(super) fn sample_keys(workload: &memfleet_loadgen::workload::Workload) -> Vec<String> {
    (0..SAMPLE)
        .map(|n| {
            let mut key = Vec::new();
            workload.push_key_bytes(n, &mut key);
            String::from_utf8_lossy(&key).into_owned()
        })
        .collect()
}

/// Each sample key's member (`name:port`), as the router says and as the ring says.
pub(super) struct Snapshot {
    router: Vec<String>,
    ring: Vec<String>,
}

impl Snapshot {
    /// Asks the router about every key of `keys` and computes the ring of `members`
    /// (`name:port` each) for the `main` pool of `config`.
    pub(super) fn take(
        admin: &mut Admin,
        keys: &[String],
        config: &PoolConfig,
        members: &[String],
    ) -> Result<Snapshot> {
        let mut router = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(100) {
            let asked: Vec<String> = chunk
                .iter()
                .map(|k| format!("__memfleet__.route({k})"))
                .collect();
            for servers in admin.get(&asked)? {
                let first = servers.split(' ').next().unwrap_or_default();
                router.push(first.to_string());
            }
        }
        let mut nodes: Vec<Node> = members
            .iter()
            .map(|m| {
                let (host, port) = m.rsplit_once(':').context("name:port")?;
                Ok(Node::new(host, port.parse()?))
            })
            .collect::<Result<_>>()?;
        // The router sorts DNS members by name:port before placing them.
        nodes.sort_by_key(Node::addr);
        let ring = config.ring_of(nodes.clone())?;
        let ring = keys
            .iter()
            .map(|k| nodes[ring.pick(k.as_bytes())].addr())
            .collect();
        Ok(Snapshot { router, ring })
    }

    /// Keys the router places elsewhere than the ring.
    pub(super) fn disagreements(&self) -> usize {
        self.router
            .iter()
            .zip(&self.ring)
            .filter(|(a, b)| a != b)
            .count()
    }
}

/// What a replacement did to the sample's placement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Moves {
    /// Keys in the sample.
    pub(super) sample: usize,
    /// Keys whose member changed (the router's answers before and after).
    pub(super) moved: usize,
    /// Keys that were on a member that left: the fewest any placement must move.
    pub(super) on_leavers: usize,
    /// Keys that moved from a member that stayed to a newcomer.
    pub(super) to_newcomers: usize,
    /// Keys that moved from one member that stayed to another (consistent hashing: none).
    pub(super) between_stayers: usize,
    /// Keys the ring computed here places elsewhere than the router, before and after.
    pub(super) disagreements: usize,
    /// Keys that move on the rings computed here.
    pub(super) moved_on_ring: usize,
}

impl Moves {
    /// Compares the placements `before` and `after` members with names in `leavers` left
    /// and those in `newcomers` joined (`name:port` each).
    pub(super) fn between(
        before: &Snapshot,
        after: &Snapshot,
        leavers: &[String],
        newcomers: &[String],
    ) -> Moves {
        let mut m = Moves {
            sample: before.router.len(),
            disagreements: before.disagreements() + after.disagreements(),
            ..Moves::default()
        };
        for (was, is) in before.router.iter().zip(&after.router) {
            if leavers.contains(was) {
                m.on_leavers += 1;
            }
            if was == is {
                continue;
            }
            m.moved += 1;
            if !leavers.contains(was) {
                if newcomers.contains(is) {
                    m.to_newcomers += 1;
                } else {
                    m.between_stayers += 1;
                }
            }
        }
        m.moved_on_ring = before
            .ring
            .iter()
            .zip(&after.ring)
            .filter(|(a, b)| a != b)
            .count();
        m
    }

    /// `part` of the sample in percent.
    pub(super) fn percent(&self, part: usize) -> f64 {
        100.0 * part as f64 / self.sample.max(1) as f64
    }

    pub(super) fn json(&self, ideal_percent: f64) -> serde_json::Value {
        json!({
            "sample": self.sample,
            "moved": self.moved,
            "moved_percent": self.percent(self.moved),
            "ideal_percent": ideal_percent,
            "on_leavers": self.on_leavers,
            "to_newcomers": self.to_newcomers,
            "between_stayers": self.between_stayers,
            "moved_on_offline_ring": self.moved_on_ring,
            "router_vs_offline_ring_disagreements": self.disagreements,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(owners: &[&str]) -> Snapshot {
        let owners: Vec<String> = owners.iter().map(|s| s.to_string()).collect();
        Snapshot {
            router: owners.clone(),
            ring: owners,
        }
    }

    #[test]
    fn moves_are_told_apart_by_where_they_come_from_and_go() {
        let before = snapshot(&["a", "b", "c", "c", "d"]);
        let after = snapshot(&["a", "e", "e", "b", "d"]);
        let m = Moves::between(&before, &after, &["c".into()], &["e".into()]);
        assert_eq!(m.sample, 5);
        assert_eq!(m.moved, 3);
        assert_eq!(m.on_leavers, 2);
        assert_eq!(m.to_newcomers, 1);
        assert_eq!(m.between_stayers, 0);
        assert_eq!(m.moved_on_ring, 3);
        assert_eq!(m.disagreements, 0);
        let stayers = Moves::between(&after, &before, &[], &[]);
        assert_eq!(stayers.between_stayers, 3);
        assert_eq!(stayers.percent(stayers.moved), 60.0);
    }
}

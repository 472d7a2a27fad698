//! The experiments of `memfleet bench`, end to end in their short form: each starts
//! what it needs on loopback from this build and must show its paper's direction.

use crate::support;

use std::process::Command;
use support::results::{assert_figure, assert_results, out_dir};

/// The row of a table whose first words are `label`, as the numbers after it (`-` and
/// words that are not numbers are skipped; `12s` counts as 12).
fn row(stdout: &str, label: &str) -> Vec<f64> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| {
            l.strip_prefix(label)
                .is_some_and(|rest| rest.starts_with(' '))
        })
        .unwrap_or_else(|| panic!("no {label:?} row in:\n{stdout}"));
    line[label.len()..]
        .split_whitespace()
        .map(|w| w.trim_end_matches('s').parse().unwrap_or(f64::NAN))
        .collect()
}

/// Warm-up: with the route, a cold cluster's misses are filled from the warm cluster, so the
/// clients almost never query the database and see hits from the start; without it every
/// miss is a database query.
#[test]
fn warmup_scenario_spares_the_database_and_serves_hits_from_the_start() {
    let bin = env!("CARGO_BIN_EXE_memfleet");
    let dir = out_dir("warmup");
    let out = Command::new(bin)
        .args(["bench", "warmup", "--memfleet-bin", bin])
        .arg("--out")
        .arg(&dir)
        .args(["--server-memory", "64", "--keys", "20000", "--conns", "8"])
        .args(["--duration", "3s", "--db-latency", "10ms"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    // gets, db, db/100get, clnt hit%, cold last%, 50% at, 90% at, p50, p99, cold items, errors
    let with = row(&stdout, "with warm-up");
    let without = row(&stdout, "without warm-up");
    assert!(with[0] > 0.0 && without[0] > 0.0, "{stdout}");
    assert!(
        without[1] > 100.0,
        "too few database queries to compare:\n{stdout}"
    );
    assert!(with[1] * 10.0 < without[1], "database queries:\n{stdout}");
    assert!(
        with[3] > 98.0 && without[3] < with[3],
        "client hit rates:\n{stdout}"
    );
    assert!(with[9] > 0.0, "the cold cluster was not filled:\n{stdout}");
    assert!(
        stdout.contains("with warm-up: the router filled "),
        "{stdout}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("warmup.json")).unwrap()).unwrap();
    assert_eq!(json["scenario"], "warmup");
    for figure in ["warmup-cold-hit-rate.png", "warmup-db-queries.png"] {
        assert_figure(&dir, figure);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// Expiry: memfleet frees expired items by segment, promptly; memcached (its LRU crawler on,
/// as by default) still holds expired items when the short TTLs have run out.
#[test]
fn expiry_scenario_shows_memfleet_holding_fewer_expired_bytes_than_memcached() {
    let bin = env!("CARGO_BIN_EXE_memfleet");
    let dir = out_dir("expiry");
    let out = Command::new(bin)
        .args(["bench", "expiry", "--memfleet-bin", bin])
        .arg("--out")
        .arg(&dir)
        .args(["--spawn", "memfleet", "--spawn", "memcached"])
        .args(["--server-memory", "64", "--duration", "8s"])
        .args(["--rate", "4000", "--short-ttl", "1-2"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    // sets, peak MiB, mean MiB, steady mean MiB, steady share%, early gone%, peak RSS MiB
    let memfleet = row(&stdout, "memfleet");
    let memcached = row(&stdout, "memcached");
    assert!(
        memfleet[0] > 10_000.0 && memcached[0] > 10_000.0,
        "{stdout}"
    );
    assert!(
        memcached[3] > 0.0,
        "memcached held no expired bytes:\n{stdout}"
    );
    assert!(
        memfleet[3] * 2.0 < memcached[3],
        "steady mean expired bytes:\n{stdout}"
    );
    assert!(stdout.contains("lru_crawler=yes"), "{stdout}");
    assert!(dir.join("expiry.json").exists());
    for figure in ["expiry-expired-bytes.png", "expiry-rss.png"] {
        assert_figure(&dir, figure);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// The discovery scenario: 32 members found through DNS, 4 replaced in place and then with
/// new names under load: no failed request (the gutter serves), no key moved in place, only
/// the leavers' keys and the newcomers' takings moved, each change followed within two
/// resolve intervals and some slack, and the router placing keys as the ring computed here.
#[test]
fn discovery_scenario_follows_dns_without_a_failed_request() {
    let bin = env!("CARGO_BIN_EXE_memfleet");
    let dir = out_dir("discovery");
    let out = Command::new(bin)
        .args(["bench", "discovery", "--memfleet-bin", bin])
        .arg("--out")
        .arg(&dir)
        .args(["--members", "32", "--keys", "2000", "--conns", "10"])
        .args(["--duration", "5s", "--replace-at", "1s"])
        .args(["--resolve-interval", "300ms", "--db-latency", "2ms"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("followed p50"), "{stdout}");
    let result = assert_results(&dir, "discovery");
    let runs = result["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{result}");
    for run in runs {
        assert_eq!(run["totals"]["failures"], 0, "{run}");
        assert!(run["totals"]["hit_ratio"].as_f64().unwrap() > 0.5, "{run}");
        let keys = &run["keys"];
        assert_eq!(keys["sample"], 20_000, "{keys}");
        assert_eq!(keys["router_vs_offline_ring_disagreements"], 0, "{keys}");
        assert_eq!(keys["between_stayers"], 0, "{keys}");
        assert_eq!(keys["moved"], keys["moved_on_offline_ring"], "{keys}");
        let steps = run["replacements"].as_array().unwrap();
        assert_eq!(steps.len(), 4, "{run}");
        for step in steps {
            // Two intervals of 300 ms, and 1.5 s that a loaded two-core machine may add.
            let followed = step["followed_ms"].as_f64().unwrap();
            assert!(followed <= 2100.0, "{step}");
            assert_ne!(step["old_addr"], step["new_addr"], "{step}");
            let renamed = step["member"] != step["replacement"];
            assert_eq!(renamed, run["label"] == "new names", "{step}");
        }
    }
    let (in_place, renamed) = (&runs[0]["keys"], &runs[1]["keys"]);
    assert_eq!(in_place["moved"], 0, "{in_place}");
    let share = |k: &str| 100.0 * renamed[k].as_f64().unwrap() / 20_000.0;
    assert_eq!(renamed["ideal_percent"], 12.5, "{renamed}");
    // Every key of the 4 leavers moves (of 32 members: about 12.5%), and the newcomers'
    // points on the ring take about 12.5% × 28/32 from the members that stay.
    assert!((share("on_leavers") - 12.5).abs() < 5.0, "{renamed}");
    let taken = share("to_newcomers") - 12.5 * 28.0 / 32.0;
    assert!(taken.abs() < 5.0, "{renamed}");
    assert_figure(&dir, "discovery-timeline.png");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Regions (Facebook §5): the replica region's invalidator reads its standby, so no read
/// in that region is stale once its caches were invalidated; writes from the replica region
/// read back fresh with remote markers and stale without them while the standby lags; every
/// invalidation arrives after its replay, and none is lost when the invalidator is killed
/// (-9) and the standby restarts.
#[test]
fn regions_scenario_invalidates_a_replica_region_only_after_its_standby_replayed() {
    let bin = env!("CARGO_BIN_EXE_memfleet");
    let dir = out_dir("regions");
    let out = Command::new(bin)
        .args(["bench", "regions", "--memfleet-bin", bin])
        .arg("--out")
        .arg(&dir)
        .args(["--delays", "0s,1s", "--phase", "4s", "--keys", "200"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    let result = assert_results(&dir, "regions");
    let phases = result["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 3, "two delays and the faults: {result}");
    // The standby's planned restart ends with a fast shutdown, unless PostgreSQL 16.2 hangs
    // in it (then an immediate stop, as a crash: a standby that crashes may come back
    // showing an older state for a moment, which these checks would count).
    let crashed = result["standby_restart"] == "immediate";
    for phase in phases {
        for region in ["master", "replica"] {
            let r = &phase["regions"][region];
            assert!(r["writes"].as_u64().unwrap() > 50, "{phase}");
            assert!(r["reads"].as_u64().unwrap() > 200, "{phase}");
            if crashed && phase["label"] == "faults" {
                continue;
            }
            assert_eq!(r["stale_reads_after_invalidation"], 0, "{region}: {phase}");
            assert_eq!(r["invalidated_before_replayed"], 0, "{phase}");
            // Also while the invalidator restarts and delivers again what it had not
            // confirmed: an old write's invalidation clears only its own write's marker.
            assert_eq!(r["read_your_writes"]["with_markers"]["stale"], 0, "{phase}");
        }
    }
    // A second of replay delay: without markers the replica region reads its own write back
    // stale (almost) every time; with them never, and some reads went to the master.
    let delayed = &phases[1]["regions"]["replica"];
    assert_eq!(phases[1]["apply_delay_ms"], 1000, "{result}");
    let without = &delayed["read_your_writes"]["without_markers"];
    let with = &delayed["read_your_writes"]["with_markers"];
    assert!(with["reads"].as_u64().unwrap() > 20, "{delayed}");
    assert!(
        without["stale"].as_u64().unwrap() * 2 > without["reads"].as_u64().unwrap(),
        "{delayed}"
    );
    // Invalidation lag never below the delay the standby's replay adds (both counted from
    // the moment COMMIT was sent, before the commit time the delay counts from).
    let lag = |what: &str, q: &str| delayed[what][q].as_f64().unwrap();
    assert!(lag("replication_lag_ms", "min") >= 1000.0, "{delayed}");
    assert!(lag("invalidation_lag_ms", "min") >= 1000.0, "{delayed}");
    assert!(lag("invalidation_lag_ms", "p50") < 3000.0, "{delayed}");
    for region in ["master", "replica"] {
        assert_eq!(result["lost_invalidations"][region], 0, "{result}");
        assert_eq!(result["stale_keys_at_end"][region], 0, "{result}");
    }
    let markers = &result["remote_markers"];
    assert!(markers["set"].as_u64().unwrap() > 50, "{markers}");
    assert!(markers["master_reads"].as_u64().unwrap() > 0, "{markers}");
    assert!(
        markers["cleared"].as_u64() >= markers["set"].as_u64(),
        "{markers}"
    );
    assert_figure(&dir, "regions-lag.png");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A migration through the router (issue 29): shadow a new cluster, migrate, drain the old
/// one with a null route, each by a reload under look-aside load with writes: no client
/// error and no stale read anywhere, the shadow's mismatches fall as the new cluster warms,
/// the old cluster serves reads during the migration (the fallback) and nothing once
/// drained.
#[test]
fn migration_scenario_moves_a_cluster_without_an_error_or_a_stale_read() {
    let bin = env!("CARGO_BIN_EXE_memfleet");
    let dir = out_dir("migration");
    let out = Command::new(bin)
        .args(["bench", "migration", "--quick", "--memfleet-bin", bin])
        .arg("--out")
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    let result = assert_results(&dir, "migration");
    assert_eq!(result["client_errors"], 0, "{stdout}");
    assert_eq!(result["stale_reads"], 0, "{stdout}");
    let totals: Vec<&serde_json::Value> = result["totals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t[1])
        .collect();
    let names: Vec<&str> = result["totals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t[0].as_str().unwrap())
        .collect();
    assert_eq!(names, ["shadow", "migrate", "drain"], "{stdout}");
    let (shadow, migrate, drain) = (totals[0], totals[1], totals[2]);
    let n = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap();
    // Written keys were read (and checked) in every phase, and the writer wrote in each
    // (3 s phases: at 200 writes/s about 600 and 150 checked on a quiet machine; a loaded one
    // saw 146 and 78 in the drain).
    for t in &totals {
        assert!(n(t, "checked") > 30 && n(t, "writes") > 50, "{stdout}");
    }
    // The shadow compared gets, and the new cluster got the copies.
    assert!(n(shadow, "compared") > 1000, "{stdout}");
    assert!(n(shadow, "new_requests") > 1000, "{stdout}");
    assert_eq!(n(shadow, "dropped"), 0, "{stdout}");
    // Mismatches fall as the new cluster warms: the last shadow second's rate is a tenth
    // of the first's at most.
    let seconds: Vec<&serde_json::Value> = result["seconds"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["phase"] == "shadow" && n(s, "compared") > 0)
        .collect();
    let rate = |s: &serde_json::Value| n(s, "mismatches") as f64 / n(s, "compared") as f64;
    let (first, last) = (seconds[0], seconds[seconds.len() - 1]);
    assert!(
        rate(first) > 0.2,
        "a cold new cluster differs at first: {stdout}"
    );
    assert!(rate(last) < rate(first) / 10.0, "{stdout}");
    // Migrating: the old cluster still answers (fallback reads, deletes to both); drained:
    // nothing reaches it after the second of the reload (which may carry the last few
    // requests of the migration).
    assert!(n(migrate, "old_requests") > 0, "{stdout}");
    let drained: Vec<&serde_json::Value> = result["seconds"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["phase"] == "drain")
        .collect();
    assert!(drained.len() >= 2, "{stdout}");
    assert!(n(drained[0], "old_requests") < 100, "{stdout}");
    for s in &drained[1..] {
        assert_eq!(n(s, "old_requests"), 0, "{stdout}");
    }
    assert!(n(drain, "new_requests") > 1000, "{stdout}");
    assert_figure(&dir, "migration-requests.png");
    assert_figure(&dir, "migration-mismatches.png");
    std::fs::remove_dir_all(dir).unwrap();
}

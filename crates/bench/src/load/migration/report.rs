//! The migration experiment's output: the per-second table, the totals per phase,
//! migration.json and the figures.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Result;
use memfleet_results::plot::{self, Series};
use serde_json::json;

use super::clients::Second;
use super::Phase;

/// Totals over the run and per phase.
pub(super) struct Summary {
    pub errors: u64,
    pub stale: u64,
    pub phases: Vec<(Phase, Second)>,
}

fn add(t: &mut Second, s: &Second) {
    t.gets += s.gets;
    t.hits += s.hits;
    t.db += s.db;
    t.errors += s.errors;
    t.checked += s.checked;
    t.stale += s.stale;
    t.writes += s.writes;
    t.compared += s.compared;
    t.mismatches += s.mismatches;
    t.dropped += s.dropped;
    t.old_requests += s.old_requests;
    t.new_requests += s.new_requests;
}

impl Summary {
    pub(super) fn of(seconds: &[Second]) -> Summary {
        let mut phases: Vec<(Phase, Second)> = Vec::new();
        for s in seconds {
            match phases.last_mut() {
                Some((p, t)) if *p == s.phase => add(t, s),
                _ => {
                    let mut t = Second {
                        phase: s.phase,
                        ..Second::default()
                    };
                    add(&mut t, s);
                    phases.push((s.phase, t));
                }
            }
        }
        Summary {
            errors: seconds.iter().map(|s| s.errors).sum(),
            stale: seconds.iter().map(|s| s.stale).sum(),
            phases,
        }
    }
}

/// Mismatches per 1 000 compared gets, if any were compared.
fn per_mille(s: &Second) -> Option<f64> {
    (s.compared > 0).then(|| 1000.0 * s.mismatches as f64 / s.compared as f64)
}

/// The table printed after the run.
pub(super) fn table(seconds: &[Second], summary: &Summary) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\n{:>4} {:>8} {:>8} {:>6} {:>7} {:>6} {:>6} {:>6} {:>8} {:>9} {:>9} {:>9}",
        "sec",
        "phase",
        "gets/s",
        "hit%",
        "db/s",
        "errors",
        "stale",
        "writes",
        "compared",
        "mismatch‰",
        "old req/s",
        "new req/s"
    );
    for (i, s) in seconds.iter().enumerate() {
        let _ = writeln!(
            t,
            "{:>4} {:>8} {:>8} {:>6.1} {:>7} {:>6} {:>6} {:>6} {:>8} {:>9} {:>9} {:>9}",
            i + 1,
            s.phase.name(),
            s.gets,
            100.0 * s.hits as f64 / s.gets.max(1) as f64,
            s.db,
            s.errors,
            s.stale,
            s.writes,
            s.compared,
            per_mille(s).map_or("-".into(), |m| format!("{m:.1}")),
            s.old_requests,
            s.new_requests
        );
    }
    let _ = writeln!(t);
    for (phase, s) in &summary.phases {
        let _ = writeln!(
            t,
            "{:>8}: {} gets ({:.1}% hits), {} client errors, {} stale of {} checked reads, \
             {} writes; shadow {} compared, {} mismatched, {} dropped; old cluster {} requests, \
             new {}",
            phase.name(),
            s.gets,
            100.0 * s.hits as f64 / s.gets.max(1) as f64,
            s.errors,
            s.stale,
            s.checked,
            s.writes,
            s.compared,
            s.mismatches,
            s.dropped,
            s.old_requests,
            s.new_requests
        );
    }
    let shadow: Vec<&Second> = seconds
        .iter()
        .filter(|s| s.phase == Phase::Shadow)
        .collect();
    if let (Some(first), Some(last)) = (shadow.first(), shadow.last()) {
        let _ = writeln!(
            t,
            "shadow mismatches: {} of {} compared in its first second, {} of {} in its last",
            first.mismatches, first.compared, last.mismatches, last.compared
        );
    }
    let _ = writeln!(
        t,
        "client errors {} (goal 0), stale reads {} (goal 0)",
        summary.errors, summary.stale
    );
    t
}

/// `migration.json`.
pub(super) fn json(
    settings: &serde_json::Value,
    seconds: &[Second],
    summary: &Summary,
    boundaries: &[(Phase, f64)],
    load_at_end: &str,
) -> serde_json::Value {
    json!({
        "parameters": settings,
        "load_average_at_end": load_at_end,
        "phases_began_s": boundaries.iter().map(|(p, at)| (p.name(), at)).collect::<Vec<_>>(),
        "seconds": seconds,
        "totals": summary.phases.iter().map(|(p, s)| (p.name(), s)).collect::<Vec<_>>(),
        "client_errors": summary.errors,
        "stale_reads": summary.stale,
    })
}

/// `migration-requests.png` (each cluster's requests per second) and
/// `migration-mismatches.png` (shadow mismatches per 1 000 compared gets).
pub(super) fn figures(dir: &Path, seconds: &[Second]) -> Result<Vec<PathBuf>> {
    let old = plot::per_second(seconds, |s| Some(s.old_requests as f64));
    let new = plot::per_second(seconds, |s| Some(s.new_requests as f64));
    let hits = plot::per_second(seconds, |s| {
        (s.gets > 0).then(|| 100.0 * s.hits as f64 / s.gets as f64)
    });
    let requests = dir.join("migration-requests.png");
    plot::line_chart(
        &requests,
        "Requests per second at each cluster: shadow, migrate, drain",
        "seconds",
        "requests/s",
        &[
            Series {
                name: "old cluster".into(),
                points: old,
            },
            Series {
                name: "new cluster".into(),
                points: new,
            },
        ],
        false,
    )?;
    let hit_rate = dir.join("migration-hit-rate.png");
    plot::line_chart(
        &hit_rate,
        "Client hit rate through the migration",
        "seconds",
        "hit rate (%)",
        &[Series {
            name: "clients".into(),
            points: hits,
        }],
        false,
    )?;
    let mut written = vec![requests, hit_rate];
    let mismatches = plot::per_second(seconds, per_mille);
    if !mismatches.is_empty() {
        let path = dir.join("migration-mismatches.png");
        plot::line_chart(
            &path,
            "Shadow gets whose replies differed, per 1000 compared",
            "seconds",
            "mismatches per 1000",
            &[Series {
                name: "new cluster vs old".into(),
                points: mismatches,
            }],
            false,
        )?;
        written.push(path);
    }
    Ok(written)
}

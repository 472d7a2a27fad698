//! memfleet-results: where `memfleet bench` and `memfleet sim` leave their results for
//! scripts: one JSON file per run ([`write_json`]) and the PNG figures of [`plot`], in the
//! directory given with `--out`.
//!
//! Every file carries the exact command line and the load average at the start
//! ([`provenance`]), so a number in `docs/BENCHMARKS.md` can always be traced back to how it
//! was made. A library both tools use, so that neither depends on the other; not here: what
//! the numbers mean (the simulator in `memfleet-sim`, the experiments in `memfleet-bench`).

pub mod plot;
pub mod provenance;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

/// A result file's envelope: what made it, then the scenario's own data.
#[derive(Debug, Serialize)]
struct Envelope<'a, T: Serialize> {
    scenario: &'a str,
    command: String,
    load_average_at_start: String,
    unix_time: u64,
    result: &'a T,
}

/// Writes `result` as `<dir>/<name>.json` (pretty-printed), creating `dir`, and returns the
/// path. `scenario` names what produced it (`load`, `herd`, `replay`, ...).
pub fn write_json<T: Serialize>(
    dir: &Path,
    name: &str,
    scenario: &str,
    result: &T,
) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{name}.json"));
    let envelope = Envelope {
        scenario,
        command: provenance::command_line(),
        load_average_at_start: provenance::load_average(),
        unix_time: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        result,
    };
    let text = serde_json::to_string_pretty(&envelope)?;
    std::fs::write(&path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_an_envelope_with_the_result() {
        let dir = std::env::temp_dir().join(format!("memfleet-results-{}", std::process::id()));
        let path = write_json(&dir, "demo", "load", &serde_json::json!({"ops": 5})).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["scenario"], "load");
        assert_eq!(v["result"]["ops"], 5);
        assert!(!v["command"].as_str().unwrap().is_empty());
        std::fs::remove_dir_all(dir).unwrap();
    }
}

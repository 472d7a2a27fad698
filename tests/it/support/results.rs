//! What the `memfleet bench` tests check of `--out`: a fresh directory per test, result
//! files of the right scenario, and figures that are real PNG images.

use std::path::{Path, PathBuf};

/// A fresh (removed if it exists) directory for one test's `--out`.
pub fn out_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memfleet-out-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Asserts `dir/<scenario>.json` is a result file of `scenario` and returns its `result`.
pub fn assert_results(dir: &Path, scenario: &str) -> serde_json::Value {
    let path = dir.join(format!("{scenario}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["scenario"], scenario, "{text}");
    json["result"].take()
}

/// Asserts `dir/name` is a PNG image of some substance.
pub fn assert_figure(dir: &Path, name: &str) {
    let bytes = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{name} is not a PNG"
    );
    assert!(bytes.len() > 5_000, "{name} is only {} bytes", bytes.len());
}

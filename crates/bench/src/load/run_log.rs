//! What the experiments print around their tables: the load average and the command line
//! at the start and at the end (runs on a shared machine are read with them), and where
//! the results went.

use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use super::{command_line, load_average};

/// The command line and the load average when an experiment started.
pub(crate) struct RunLog {
    command: String,
    load_at_start: String,
}

impl RunLog {
    /// Notes the command line and the load average now.
    pub(crate) fn new() -> RunLog {
        RunLog {
            command: command_line(),
            load_at_start: load_average(),
        }
    }

    /// Prints the load average at the start and the command line.
    pub(crate) fn print_start(&self) {
        println!("load average at start: {}", self.load_at_start);
        println!("command: {}", self.command);
    }

    /// Prints the load average at the start and now, and the command line again; returns
    /// the load average now.
    pub(crate) fn print_end(&self) -> String {
        let load_at_end = load_average();
        println!(
            "load average: {} at start, {load_at_end} at end",
            self.load_at_start
        );
        println!("command: {}", self.command);
        load_at_end
    }
}

/// Writes `value` to `dir/<scenario>.json` and says so.
pub(crate) fn write_results(dir: &Path, scenario: &str, value: &impl Serialize) -> Result<()> {
    let path = memfleet_results::write_json(dir, scenario, scenario, value)?;
    println!("results: {}", path.display());
    Ok(())
}

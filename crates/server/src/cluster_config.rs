//! AWS ElastiCache's auto discovery on a server (`--cluster-config FILE`): `config get
//! cluster` answers the cluster's nodes from a file the operator keeps (`host|ip|port`
//! entries, separated by spaces or lines, `#` comments), as every ElastiCache node answers it. The AWS
//! cluster client polls the nodes themselves, so a fleet behind a configuration endpoint
//! (`memfleet router` with `auto_discovery`) gives each server the same file.
//!
//! The file is read again when its modification time or size changes (one `stat` per
//! request). The version is the file's modification time in Unix seconds, or one more than
//! the last version when that is later, so it grows with every change and is comparable with
//! the router's (the second it saw the change). A file that stops parsing keeps the last good
//! list (logged); without the flag, `config` is `ERROR`, as memcached answers it.

use crate::file_stamp::{stamp, FileStamp};
use anyhow::{bail, Context};
use memfleet_protocol::response;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// The cluster's nodes as last read, and their version.
pub struct ClusterConfig {
    path: PathBuf,
    state: Mutex<Read>,
}

struct Read {
    stamp: FileStamp,
    entries: Vec<u8>,
    version: u64,
}

fn seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_secs().max(1))
}

/// The entries of `text`, checked (`host|ip|port`, a non-empty host, a port number) and
/// joined by single spaces.
fn parse(text: &str) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    // `#` starts a comment that runs to the end of its line.
    let entries = text
        .lines()
        .flat_map(|l| l.split('#').next().unwrap_or("").split_whitespace());
    for entry in entries {
        let parts: Vec<&str> = entry.split('|').collect();
        let ok = parts.len() == 3 && !parts[0].is_empty() && parts[2].parse::<u16>().is_ok();
        if !ok {
            bail!("{entry:?} is not host|ip|port");
        }
        if !out.is_empty() {
            out.push(b' ');
        }
        out.extend_from_slice(entry.as_bytes());
    }
    if out.is_empty() {
        bail!("no nodes (host|ip|port entries)");
    }
    Ok(out)
}

fn load(path: &Path) -> anyhow::Result<Vec<u8>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text).with_context(|| format!("in {}", path.display()))
}

impl ClusterConfig {
    /// Reads the file; an error stops the start.
    pub fn load(path: &Path) -> anyhow::Result<ClusterConfig> {
        let stamp = stamp(path);
        let entries = load(path)?;
        Ok(ClusterConfig {
            path: path.to_path_buf(),
            state: Mutex::new(Read {
                version: stamp.map_or(1, |(t, _)| seconds(t)),
                stamp,
                entries,
            }),
        })
    }

    /// The answer to `config <args>`.
    pub fn answer(&self, args: &[u8], out: &mut Vec<u8>) {
        if !response::is_config_get_cluster(args) {
            out.extend_from_slice(b"ERROR\r\n");
            return;
        }
        let mut read = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = stamp(&self.path);
        if now != read.stamp {
            read.stamp = now;
            match load(&self.path) {
                Ok(entries) if entries != read.entries => {
                    let at = now.map_or(0, |(t, _)| seconds(t));
                    read.version = (read.version + 1).max(at);
                    read.entries = entries;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("--cluster-config: {e:#}; serving the last list"),
            }
        }
        response::cluster_config(out, read.version, &read.entries);
    }
}

//! A `memfleet router -t 1` on a configuration file of its own (written to the temporary
//! directory, removed with the router). Not here: what the configuration says
//! (`router_config`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::process::Spawned;
use crate::router_config::RouterConfig;

/// A `memfleet router -t 1` started for a test or an experiment, with its configuration in
/// a temporary file that goes away with it.
pub struct Router {
    /// The process (stopped when dropped).
    pub spawned: Spawned,
    config: PathBuf,
}

impl Router {
    /// Writes `config` (which must make the router listen on `addr`) and starts `bin router`
    /// on it, pinned to `cpu` if given; returns once `addr` accepts connections.
    pub fn start(bin: &str, config: &str, addr: SocketAddr, cpu: Option<usize>) -> Result<Router> {
        let path = std::env::temp_dir().join(format!(
            "memfleet-bench-router-{}-{}.toml",
            std::process::id(),
            addr.port()
        ));
        std::fs::write(&path, config).with_context(|| format!("writing {}", path.display()))?;
        let argv: Vec<String> = [bin, "router", "-t", "1", "--config"]
            .map(String::from)
            .into_iter()
            .chain([path.display().to_string()])
            .collect();
        let spawned = Spawned::start(&argv, addr, cpu);
        if spawned.is_err() {
            let _ = std::fs::remove_file(&path);
        }
        Ok(Router {
            spawned: spawned?,
            config: path,
        })
    }

    /// A cluster's router, as the paper's mcsqueal talks to: one pool `name` of the servers
    /// on `ports`, its delete spool in `spool_dir`, listening on a free port (returned).
    pub fn in_front_of(
        bin: &str,
        name: &str,
        ports: &[u16],
        spool_dir: &Path,
    ) -> Result<(Router, u16)> {
        let port = crate::ports::free_port();
        let mut config = RouterConfig::new();
        config
            .section("router")
            .set_str("spool_dir", &spool_dir.display().to_string());
        config.pool(name, ports).listen(port);
        let router = Router::start(bin, &config.text(), ([127, 0, 0, 1], port).into(), None)?;
        Ok((router, port))
    }
}

impl Router {
    /// Replaces the configuration file with `config` (whole, by a rename, so the router's
    /// file watcher never reads half of it) and sends SIGHUP; the caller waits for the
    /// reload to apply (e.g. until `get __memfleet__.config_md5` answers the new text's).
    pub fn reload(&self, config: &str) -> Result<()> {
        let next = self.config.with_extension("toml.next");
        std::fs::write(&next, config).with_context(|| format!("writing {}", next.display()))?;
        std::fs::rename(&next, &self.config)
            .with_context(|| format!("renaming onto {}", self.config.display()))?;
        self.spawned.signal(libc::SIGHUP);
        Ok(())
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.config);
    }
}

//! Reading a router's files (the configuration, the auth file) and watching them: a
//! reload on SIGHUP and whenever one of them (or a TLS file) changes.

use crate::args::RouterArgs;
use crate::reloadable::ClientAuth;
use anyhow::Context;
use memfleet_authfile::Credentials;
use memfleet_routing::{ConfigOrigin, RouterConfig};
use memfleet_tls::ServerTls;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Reads the configuration a router is started with.
pub fn load_config(args: &RouterArgs) -> anyhow::Result<RouterConfig> {
    let (path, twemproxy) = match (&args.config, &args.twemproxy) {
        (Some(p), None) => (p, false),
        (None, Some(p)) => (p, true),
        _ => anyhow::bail!("give --config FILE.toml or --twemproxy FILE.yml"),
    };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let config = if twemproxy {
        memfleet_routing::from_twemproxy_yaml(&text).map(RouterConfig::from)
    } else {
        memfleet_routing::from_toml(&text)
    };
    let origin = ConfigOrigin::of(&path.display().to_string(), text.as_bytes());
    config
        .map(|c| RouterConfig {
            origin: Some(origin),
            ..c
        })
        .with_context(|| format!("in {}", path.display()))
}

/// Reads an auth file (`user:password` lines, memcached's `-Y` format).
pub fn load_auth(path: &Path) -> anyhow::Result<Credentials> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Credentials::parse(&text).with_context(|| format!("in {}", path.display()))
}

/// Reloads on SIGHUP and when the configuration file changes (checked every second: its
/// size and modification time, which an editor's rename-over also changes). A file that
/// does not parse is logged and ignored; the next change is tried again. The TLS
/// certificate, key and CA files are reloaded the same way (on SIGHUP, or when one of them
/// changes); one that does not load leaves the certificate in service. The auth file
/// (`--auth-file`) too: one that does not load leaves the users in service.
pub(crate) async fn watch_config(
    args: RouterArgs,
    mut hup: tokio::signal::unix::Signal,
    reloads: tokio::sync::mpsc::UnboundedSender<RouterConfig>,
    tls: Option<Arc<ServerTls>>,
    auth: ClientAuth,
) {
    let path = args.config.clone().or_else(|| args.twemproxy.clone());
    let stamp = |p: &Option<PathBuf>| {
        p.as_ref()
            .and_then(|p| std::fs::metadata(p).ok())
            .map(|m| (m.len(), m.modified().ok()))
    };
    let tls_paths: Vec<Option<PathBuf>> = tls.as_ref().map_or(Vec::new(), |t| {
        let f = t.files();
        vec![Some(f.cert.clone()), Some(f.key.clone()), f.ca.clone()]
    });
    let tls_stamps = || tls_paths.iter().map(stamp).collect::<Vec<_>>();
    let mut seen = stamp(&path);
    let mut tls_seen = tls_stamps();
    let mut auth_seen = stamp(&args.auth_file);
    let reload_auth = || {
        let Some(file) = &args.auth_file else {
            return;
        };
        match load_auth(file) {
            Ok(credentials) => {
                tracing::info!(file = %file.display(), "auth file reloaded");
                auth.store(Some(Arc::new(credentials)));
            }
            Err(e) => tracing::error!(
                error = %format!("{e:#}"),
                "auth file refused; the users loaded before keep their access"
            ),
        }
    };
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    // Configurations sent so far (systemd's READY=1 after a SIGHUP waits for its own).
    let mut sent = 0u64;
    loop {
        let why = tokio::select! {
            _ = hup.recv() => {
                crate::systemd::reloading();
                auth_seen = stamp(&args.auth_file);
                reload_auth();
                if let Some(tls) = &tls {
                    tls_seen = tls_stamps();
                    // A failure is logged and counted; the certificate in service stays.
                    let _ = tls.reload();
                }
                "SIGHUP"
            }
            _ = tick.tick() => {
                let now = stamp(&args.auth_file);
                if now != auth_seen {
                    auth_seen = now;
                    reload_auth();
                }
                if let Some(tls) = &tls {
                    let now = tls_stamps();
                    if now != tls_seen {
                        tls_seen = now;
                        let _ = tls.reload();
                    }
                }
                let now = stamp(&path);
                if now == seen {
                    continue;
                }
                seen = now;
                "the file changed"
            }
        };
        match load_config(&args) {
            Ok(config) => {
                tracing::info!(reason = why, "reloading the configuration");
                sent += 1;
                if why == "SIGHUP" {
                    crate::systemd::ready_after(sent);
                }
                if reloads.send(config).is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::error!(reason = why, error = %format!("{e:#}"), "new configuration refused; the old one keeps serving");
                if why == "SIGHUP" {
                    crate::systemd::reload_refused("the new configuration was refused");
                }
            }
        }
    }
}

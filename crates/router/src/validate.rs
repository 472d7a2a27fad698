//! `memfleet router --validate-config FILE` (mcrouter's) and `-t` / `--test-conf`
//! (nutcracker's): the configuration read and checked as a start or a reload would, every
//! problem printed, nothing bound, no server contacted.

use crate::args::RouterArgs;
use memfleet_routing::{check_toml, check_twemproxy_yaml, ConfigError, RouterConfig};
use std::path::{Path, PathBuf};

/// Checks the configuration `args` name; prints `<file>: OK ...` to stdout, or each
/// problem to stderr and returns an error.
pub(crate) fn run(args: &RouterArgs) -> anyhow::Result<()> {
    let (path, twemproxy) = file(args)?;
    match check(&path, twemproxy, args.thread_count()) {
        Ok(config) => {
            let listeners = config.pools.iter().filter(|p| p.listen.is_some()).count()
                + config.routes.iter().filter(|r| r.listen.is_some()).count();
            println!(
                "{}: OK: {} pool(s), {} route(s), {listeners} listener(s)",
                path.display(),
                config.pools.len(),
                config.routes.len()
            );
            Ok(())
        }
        Err(problems) => {
            for p in &problems {
                eprintln!("{}: {p}", path.display());
            }
            anyhow::bail!(
                "{}: {} problem(s); the configuration would be refused",
                path.display(),
                problems.len()
            )
        }
    }
}

/// The file to check and whether it is twemproxy's YAML.
fn file(args: &RouterArgs) -> anyhow::Result<(PathBuf, bool)> {
    if let Some(p) = &args.validate_config {
        let yaml = p.extension().is_some_and(|e| e == "yml" || e == "yaml");
        return Ok((p.clone(), yaml));
    }
    match (&args.config, &args.twemproxy) {
        (Some(p), None) => Ok((p.clone(), false)),
        (None, Some(p)) => Ok((p.clone(), true)),
        _ => anyhow::bail!(
            "-t checks the file given with --config FILE.toml or --twemproxy FILE.yml"
        ),
    }
}

/// Every problem of the file at `path`, as a start of the router would find them before
/// binding: its syntax, each pool and route, the routes together, the listeners (their
/// `workers` against `threads` when it is given: `-t N` with `--validate-config`).
fn check(
    path: &Path,
    twemproxy: bool,
    threads: Option<usize>,
) -> Result<RouterConfig, Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| vec![format!("cannot read: {e}")])?;
    let strings = |errors: Vec<ConfigError>| errors.iter().map(ToString::to_string).collect();
    let config = if twemproxy {
        check_twemproxy_yaml(&text).map(RouterConfig::from)
    } else {
        check_toml(&text)
    }
    .map_err(strings)?;
    let config = RouterConfig {
        workers: threads.unwrap_or(0),
        ..config
    };
    let problems = config.listener_problems();
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(strings(problems))
    }
}

//! A scratch PostgreSQL for tests and experiments: `initdb` into a temporary directory,
//! `wal_level = logical`, a free port on 127.0.0.1, no fsync, stopped (immediately) and
//! deleted when dropped. PostgreSQL refuses to run as root, so as root it runs as `nobody`
//! (through `su`). Not for production data.
//!
//! [`Postgres::standby`] makes a streaming (physical) standby of one with `pg_basebackup -R`,
//! as a replica region's database (paper §5); logical decoding on it needs PostgreSQL 16 or
//! later ([`Postgres::start_at_least`]).
//!
//! The binaries are, in this order: the directory `MEMFLEET_POSTGRES_BIN` names; PostgreSQL
//! 16 as `scripts/postgres16` unpacks it (as root `/usr/local/lib/memfleet/postgresql-16/...`,
//! else `target/tools/postgresql-16/...`); PATH; Debian's
//! `/usr/lib/postgresql/<version>/bin`, the newest (`scripts/test` installs the `postgresql`
//! package and runs `scripts/postgres16`).

use anyhow::{ensure, Context};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A running scratch PostgreSQL.
pub struct Postgres {
    /// Its port on 127.0.0.1 (user `postgres`, database `postgres`, trust authentication).
    pub port: u16,
    dir: PathBuf,
    bin: PathBuf,
    /// The `-o` options it was started with (to start it again).
    options: String,
}

/// Where `scripts/postgres16` puts PostgreSQL 16's binaries: as root where `nobody` (whom
/// PostgreSQL runs as) can reach them, else in the workspace's `target/tools`.
fn postgres16_dirs() -> [PathBuf; 2] {
    const BIN: &str = "postgresql-16/pgserver/pginstall/bin";
    [
        Path::new("/usr/local/lib/memfleet").join(BIN),
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../target/tools")
            .join(BIN),
    ]
}

/// The major version of the PostgreSQL in `bin`.
fn major_version(bin: &Path) -> anyhow::Result<u32> {
    let out = Command::new(bin.join("postgres"))
        .arg("--version")
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "postgres (PostgreSQL) 16.2"
    text.split_whitespace()
        .last()
        .and_then(|v| v.split('.').next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("{}/postgres --version said {text:?}", bin.display()))
}

/// The first installation (see the module's documentation) of at least version `at_least`.
fn find_bin(at_least: u32) -> anyhow::Result<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(dir) = std::env::var_os("MEMFLEET_POSTGRES_BIN") {
        candidates.push(dir.into());
    }
    candidates.extend(postgres16_dirs());
    candidates.extend(find_system_bin());
    let mut seen = Vec::new();
    for dir in candidates {
        if !dir.join("initdb").is_file() || !dir.join("pg_ctl").is_file() {
            continue;
        }
        let version = major_version(&dir)?;
        if version >= at_least {
            return Ok(dir);
        }
        seen.push(format!("{} ({version})", dir.display()));
    }
    anyhow::bail!(
        "no PostgreSQL {at_least} or later (found: {}): run scripts/postgres16, or name one's \
         bin directory in MEMFLEET_POSTGRES_BIN",
        if seen.is_empty() {
            "none".to_string()
        } else {
            seen.join(", ")
        }
    )
}

/// PATH's, else Debian's newest.
fn find_system_bin() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    for dir in on_path {
        if dir.join("initdb").is_file() && dir.join("pg_ctl").is_file() {
            return Some(dir);
        }
    }
    let mut debian: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    debian.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    debian.pop().filter(|d| d.join("initdb").is_file())
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `program args` as the user PostgreSQL runs as.
fn run_as_pg(program: &Path, args: &[&str]) -> anyhow::Result<std::process::Output> {
    let output = if is_root() {
        let mut line = shell_quote(&program.display().to_string());
        for a in args {
            line.push(' ');
            line.push_str(&shell_quote(a));
        }
        Command::new("su")
            .args(["-s", "/bin/sh", "nobody", "-c", &line])
            .output()
    } else {
        Command::new(program).args(args).output()
    };
    output.with_context(|| format!("running {}", program.display()))
}

/// A fresh directory for one cluster under `parent` (owned by `nobody` when running as root).
fn scratch_dir(parent: &Path) -> anyhow::Result<PathBuf> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let dir = parent.join(format!(
        "memfleet-pg-{}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .subsec_nanos()
    ));
    std::fs::create_dir_all(&dir)?;
    if is_root() {
        let status = Command::new("chown")
            .args(["nobody", &dir.display().to_string()])
            .status()?;
        ensure!(status.success(), "chown nobody {}", dir.display());
    }
    Ok(dir)
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

impl Postgres {
    /// initdb and start.
    pub fn start() -> anyhow::Result<Postgres> {
        Postgres::start_with(&[])
    }

    /// initdb and start with extra `name=value` settings (later ones win).
    pub fn start_with(settings: &[&str]) -> anyhow::Result<Postgres> {
        Postgres::start_at_least(0, settings)
    }

    /// initdb and start PostgreSQL `version` or later (16: logical decoding on a standby),
    /// with extra `name=value` settings.
    pub fn start_at_least(version: u32, settings: &[&str]) -> anyhow::Result<Postgres> {
        Postgres::start_in(&std::env::temp_dir(), version, settings)
    }

    /// [`Postgres::start_at_least`] with the cluster's directory under `parent` (which must
    /// exist; as root, the user `nobody` must be able to reach it) rather than `$TMPDIR`.
    pub fn start_in(parent: &Path, version: u32, settings: &[&str]) -> anyhow::Result<Postgres> {
        let bin = find_bin(version)?;
        let dir = scratch_dir(parent)?;
        let data = dir.join("data");
        let out = run_as_pg(
            &bin.join("initdb"),
            &[
                "-D",
                &data.display().to_string(),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
            ],
        )?;
        ensure!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Postgres::launch(bin, dir, settings)
    }

    /// A streaming (physical) standby of this one, as a replica region's database:
    /// `pg_basebackup -R -C -S standby_<n>` (which writes `standby.signal`,
    /// `primary_conninfo` and `primary_slot_name`, and makes that physical slot on this
    /// one, so that the standby's `hot_standby_feedback` holds while it restarts), then
    /// started with `hot_standby_feedback = on` and `wal_level = logical` (so that a
    /// logical slot can be made on it, PostgreSQL 16 and later) and the extra settings
    /// (`recovery_min_apply_delay=500ms` holds its replay back).
    pub fn standby(&self, settings: &[&str]) -> anyhow::Result<Postgres> {
        self.standby_in(&std::env::temp_dir(), settings)
    }

    /// [`Postgres::standby`] with its directory under `parent` (as [`Postgres::start_in`]).
    pub fn standby_in(&self, parent: &Path, settings: &[&str]) -> anyhow::Result<Postgres> {
        let dir = scratch_dir(parent)?;
        let data = dir.join("data");
        static STANDBYS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let slot = format!(
            "standby_{}",
            STANDBYS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let out = run_as_pg(
            &self.bin.join("pg_basebackup"),
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-D",
                &data.display().to_string(),
                "-R",
                "-C",
                "-S",
                &slot,
                "-X",
                "stream",
                "--no-sync",
            ],
        )?;
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
            anyhow::bail!(
                "pg_basebackup failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let mut all = vec!["hot_standby_feedback=on"];
        all.extend_from_slice(settings);
        Postgres::launch(self.bin.clone(), dir, &all)
    }

    /// Starts the cluster in `dir/data` on a free port.
    fn launch(bin: PathBuf, dir: PathBuf, settings: &[&str]) -> anyhow::Result<Postgres> {
        let port = crate::ports::try_free_port()?;
        let mut options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c wal_level=logical \
             -c max_replication_slots=8 -c max_wal_senders=8 -c fsync=off",
            dir.display()
        );
        for s in settings {
            options.push_str(" -c ");
            options.push_str(s);
        }
        // Dropped from here on: stopped and removed even if starting fails.
        let pg = Postgres {
            port,
            dir,
            bin,
            options,
        };
        pg.pg_ctl(&["-w", "start"])?;
        Ok(pg)
    }

    /// `pg_ctl -D data -o options -l log ARGS`, failing with its output and the log.
    fn pg_ctl(&self, args: &[&str]) -> anyhow::Result<()> {
        let data = self.dir.join("data").display().to_string();
        let log = self.dir.join("log").display().to_string();
        let mut all = vec!["-D", &data, "-o", &self.options, "-l", &log];
        all.extend_from_slice(args);
        let out = run_as_pg(&self.bin.join("pg_ctl"), &all)?;
        ensure!(
            out.status.success(),
            "pg_ctl {} failed: {}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
        );
        Ok(())
    }

    /// Stops it (`-m fast`: clients are disconnected, a clean shutdown) and starts it again
    /// on the same port, waiting until it accepts connections.
    pub fn restart(&self) -> anyhow::Result<()> {
        self.pg_ctl(&["-m", "fast", "-w", "restart"])
    }

    /// Stops it with `-m fast` (a clean shutdown), or, when that does not finish within
    /// `wait`, `-m immediate` (as a crash), and starts it again; says which stop it took.
    /// (PostgreSQL 16.2's fast shutdown of a standby can wait forever for a logical
    /// walsender that waits for WAL the standby received but has not replayed.)
    pub fn restart_within(&self, wait: std::time::Duration) -> anyhow::Result<&'static str> {
        let secs = wait.as_secs().max(1).to_string();
        let how = if self
            .pg_ctl(&["-m", "fast", "-t", &secs, "-w", "stop"])
            .is_ok()
        {
            "fast"
        } else {
            self.kill()?;
            "immediate"
        };
        self.start_again()?;
        Ok(how)
    }

    /// Stops it (`-m immediate`: as a crash); [`Postgres::start_again`] brings it back.
    pub fn kill(&self) -> anyhow::Result<()> {
        self.pg_ctl(&["-m", "immediate", "stop"])
    }

    /// Starts it again after [`Postgres::kill`].
    pub fn start_again(&self) -> anyhow::Result<()> {
        self.pg_ctl(&["-w", "start"])
    }

    /// Promotes a standby to a primary (`pg_ctl promote`, waiting until it is done).
    pub fn promote(&self) -> anyhow::Result<()> {
        self.pg_ctl(&["-w", "promote"])
    }

    /// Leaves it running after this value goes (for `memfleet fleet up`): what stops and
    /// removes it later ([`Detached::stop`]).
    pub fn detach(self) -> Detached {
        let me = std::mem::ManuallyDrop::new(self);
        Detached {
            port: me.port,
            dir: me.dir.clone(),
            bin: me.bin.clone(),
        }
    }

    /// Its server log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// A plain connection (for the application's transactions); its connection task runs
    /// on the current tokio runtime.
    pub async fn connect(&self) -> anyhow::Result<tokio_postgres::Client> {
        let (client, conn) = tokio_postgres::Config::new()
            .host("127.0.0.1")
            .port(self.port)
            .user("postgres")
            .dbname("postgres")
            .connect(tokio_postgres::NoTls)
            .await
            .context("connecting to the scratch PostgreSQL")?;
        tokio::spawn(conn);
        Ok(client)
    }
}

/// A PostgreSQL left running by [`Postgres::detach`]: one line of text (`port dir bin`) says
/// how to stop it from another process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detached {
    /// Its port on 127.0.0.1.
    pub port: u16,
    dir: PathBuf,
    bin: PathBuf,
}

impl Detached {
    /// `port dir bin` (paths without spaces or newlines).
    pub fn to_line(&self) -> String {
        format!(
            "{} {} {}",
            self.port,
            self.dir.display(),
            self.bin.display()
        )
    }

    /// Reads [`Detached::to_line`]'s text.
    pub fn from_line(line: &str) -> Option<Detached> {
        let mut w = line.split_whitespace();
        Some(Detached {
            port: w.next()?.parse().ok()?,
            dir: w.next()?.into(),
            bin: w.next()?.into(),
        })
    }

    /// Stops it (`-m fast`, then `-m immediate` if that does not finish in 10 s) and
    /// removes its files.
    pub fn stop(&self) -> anyhow::Result<()> {
        let data = self.dir.join("data").display().to_string();
        let pg_ctl = self.bin.join("pg_ctl");
        let fast = run_as_pg(
            &pg_ctl,
            &["-D", &data, "-m", "fast", "-t", "10", "-w", "stop"],
        )?;
        if !fast.status.success() {
            run_as_pg(&pg_ctl, &["-D", &data, "-m", "immediate", "stop"])?;
        }
        std::fs::remove_dir_all(&self.dir)
            .with_context(|| format!("removing {}", self.dir.display()))
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let _ = run_as_pg(
            &self.bin.join("pg_ctl"),
            &["-D", &data.display().to_string(), "-m", "immediate", "stop"],
        );
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

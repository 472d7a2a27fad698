//! A scratch PostgreSQL for tests and experiments: `initdb` into a temporary directory,
//! `wal_level = logical`, a free port on 127.0.0.1, no fsync, stopped (immediately) and
//! deleted when dropped. PostgreSQL refuses to run as root, so as root it runs as `nobody`
//! (through `su`). Not for production data.
//!
//! The binaries are found on PATH or in Debian's `/usr/lib/postgresql/<version>/bin`
//! (`.ci/run` installs the `postgresql` package).

use anyhow::{ensure, Context};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A running scratch PostgreSQL.
pub struct Postgres {
    /// Its port on 127.0.0.1 (user `postgres`, database `postgres`, trust authentication).
    pub port: u16,
    dir: PathBuf,
    bin: PathBuf,
}

fn find_bin() -> anyhow::Result<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    for dir in on_path {
        if dir.join("initdb").is_file() && dir.join("pg_ctl").is_file() {
            return Ok(dir);
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
    debian
        .pop()
        .filter(|d| d.join("initdb").is_file())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "PostgreSQL is not installed (no initdb on PATH or in /usr/lib/postgresql/*/bin)"
            )
        })
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
        let bin = find_bin()?;
        let dir = std::env::temp_dir().join(format!(
            "memfleet-pg-{}-{}",
            std::process::id(),
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
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c wal_level=logical \
             -c max_replication_slots=8 -c max_wal_senders=8 -c fsync=off",
            dir.display()
        );
        for s in settings {
            options.push_str(" -c ");
            options.push_str(s);
        }
        let out = run_as_pg(
            &bin.join("pg_ctl"),
            &[
                "-D",
                &data.display().to_string(),
                "-o",
                &options,
                "-l",
                &dir.join("log").display().to_string(),
                "-w",
                "start",
            ],
        )?;
        // Dropped from here on: stopped and removed even if the checks below fail.
        let pg = Postgres { port, dir, bin };
        ensure!(
            out.status.success(),
            "pg_ctl start failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(pg.dir.join("log")).unwrap_or_default()
        );
        Ok(pg)
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

//! `memfleet bench restart`: the warm-restart experiment (Facebook §6.4). Start
//! `memfleet server` with a memory file on tmpfs, fill it, read every key back (values
//! checked) for the hit ratio, stop it with SIGUSR1, start it again on the same file, and
//! read every key again: the hit ratio right after the restart should equal the one before,
//! with no wrong value. Reports the fill, stop (snapshot) and restart times; with `--out
//! DIR` also as `restart.json`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::args::{Pinning, Spawning};
use super::run_log::write_results;
use super::target::SpawnSpec;
use super::workload::Workload;
use super::{client, command_line, load_average, runtime, start, Target};

/// `memfleet bench restart`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct RestartArgs {
    /// How the server is started.
    #[command(flatten)]
    pub spawning: Spawning,
    /// Where the load generator and the servers run.
    #[command(flatten)]
    pub pinning: Pinning,
    /// Keys stored and read back (key:0 .. key:N-1).
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Write restart.json into this directory, with the command that made it.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
}

/// What reading every key found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Readback {
    /// Keys asked for.
    pub keys: u64,
    /// Keys found with the right value.
    pub hits: u64,
    /// Keys found with a wrong value (must be 0).
    pub wrong: u64,
}

impl Readback {
    /// Hits over keys.
    pub fn hit_ratio(&self) -> f64 {
        self.hits as f64 / self.keys.max(1) as f64
    }
}

/// Reads keys `0..w.keys()` with multi-gets of `batch` keys and checks every value.
pub async fn read_all(addr: SocketAddr, w: &Workload, batch: u64) -> Result<Readback> {
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_nodelay(true)?;
    let mut s = BufReader::with_capacity(1 << 20, stream);
    let mut r = Readback::default();
    let mut line = String::new();
    let mut request = Vec::new();
    let mut data = Vec::new();
    let mut first = 0;
    while first < w.keys() {
        let last = w.keys().min(first + batch);
        request.clear();
        request.extend_from_slice(b"get");
        for n in first..last {
            request.extend_from_slice(format!(" key:{n}").as_bytes());
        }
        request.extend_from_slice(b"\r\n");
        s.get_mut().write_all(&request).await?;
        loop {
            line.clear();
            if s.read_line(&mut line).await? == 0 {
                bail!("the server closed the connection");
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["END"] => break,
                ["VALUE", key, _flags, len] => {
                    let n: u64 = key
                        .strip_prefix("key:")
                        .and_then(|k| k.parse().ok())
                        .with_context(|| format!("unexpected key {key}"))?;
                    let len: usize = len.parse()?;
                    data.resize(len + 2, 0);
                    s.read_exact(&mut data).await?;
                    if !(first..last).contains(&n) {
                        bail!("a reply for key:{n}, which was not asked for");
                    }
                    if &data[..len] == w.value(n) {
                        r.hits += 1;
                    } else {
                        r.wrong += 1;
                    }
                }
                _ => bail!("unexpected reply line {line:?}"),
            }
        }
        r.keys += last - first;
        first = last;
    }
    Ok(r)
}

/// Timings and readbacks of one restart experiment.
#[derive(Debug, Clone)]
pub struct RestartReport {
    /// Filling the cache.
    pub fill: Duration,
    /// Reading every key before the stop.
    pub before: Readback,
    /// From SIGUSR1 to the process's exit (snapshot included).
    pub stop: Duration,
    /// From starting the new process to its first accepted connection.
    pub start: Duration,
    /// Reading every key right after the restart.
    pub after: Readback,
    /// The first server's log line about the snapshot it saved.
    pub save_log: Option<String>,
    /// The new server's own log line about the restore, if it printed one.
    pub restore_log: Option<String>,
}

impl RestartReport {
    /// `restart.json`: the workload, the timings and both readbacks. No figure: the
    /// experiment is a handful of numbers, not a curve.
    pub fn json(&self, server_memory_mib: u64, w: &Workload) -> serde_json::Value {
        let readback = |r: &Readback| {
            json!({
                "keys": r.keys,
                "hits": r.hits,
                "wrong": r.wrong,
                "hit_ratio": r.hit_ratio(),
            })
        };
        json!({
            "parameters": {
                "keys": w.keys(),
                "value_size": w.value_size(),
                "server_memory_mib": server_memory_mib,
            },
            "fill_s": self.fill.as_secs_f64(),
            "before": readback(&self.before),
            "stop_ms": self.stop.as_secs_f64() * 1000.0,
            "restart_ms": self.start.as_secs_f64() * 1000.0,
            "after": readback(&self.after),
            "save_log": self.save_log,
            "restore_log": self.restore_log,
        })
    }

    /// The report's lines.
    pub fn lines(&self, w: &Workload) -> Vec<String> {
        let gib = (w.keys() as f64 * w.value_size() as f64) / f64::from(1 << 30);
        vec![
            format!(
                "filled {} keys of {} bytes ({gib:.2} GiB of values) in {:.1} s",
                w.keys(),
                w.value_size(),
                self.fill.as_secs_f64()
            ),
            format!(
                "before the stop: {} of {} keys hit ({:.2}%), {} wrong values",
                self.before.hits,
                self.before.keys,
                100.0 * self.before.hit_ratio(),
                self.before.wrong
            ),
            format!(
                "stop (SIGUSR1, snapshot written): {:.0} ms",
                self.stop.as_secs_f64() * 1000.0
            ),
            format!(
                "restart (process start to first connection): {:.0} ms",
                self.start.as_secs_f64() * 1000.0
            ),
            format!(
                "right after the restart: {} of {} keys hit ({:.2}%), {} wrong values",
                self.after.hits,
                self.after.keys,
                100.0 * self.after.hit_ratio(),
                self.after.wrong
            ),
            format!(
                "server log at stop: {}",
                self.save_log.as_deref().unwrap_or("(none)")
            ),
            format!(
                "server log at start: {}",
                self.restore_log.as_deref().unwrap_or("(none)")
            ),
        ]
    }
}

/// `memfleet bench restart`: see `restart.rs`. The memory file goes to /dev/shm (or the
/// temporary directory).
pub fn bench(args: &RestartArgs) -> Result<()> {
    let workload =
        Workload::new(args.keys, 1.0, args.value_size, None).map_err(anyhow::Error::msg)?;
    let command = command_line();
    println!("memfleet bench restart");
    println!("load average at start: {}", load_average());
    println!("command: {command}");
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let file = dir.join(format!("memfleet-bench-restart-{}", std::process::id()));
    let meta = dir.join(format!(
        "memfleet-bench-restart-{}.meta",
        std::process::id()
    ));
    let settings = args.spawning.settings(false, args.value_size);
    let (_, server_pin) = args.pinning.pins();
    let memfleet = Target::Spawn(SpawnSpec::Memfleet);
    let extra = ["--memory-file".to_string(), file.display().to_string()];
    let (rt, _) = runtime()?;
    let result = rt.block_on(async {
        let (first, addr) = start(&memfleet, &settings, server_pin, &extra)?;
        let mut first = first.expect("a spawned target");
        let t = Instant::now();
        client::prefill(addr, &workload, 100).await?;
        let fill = t.elapsed();
        let before = read_all(addr, &workload, 100).await?;
        let stop = first.stop_with(libc::SIGUSR1)?;
        let save_log = first
            .stderr_text()
            .lines()
            .find(|l| l.contains("memory file: saved"))
            .map(str::to_string);
        let t = Instant::now();
        let (second, addr) = start(&memfleet, &settings, server_pin, &extra)?;
        let second = second.expect("a spawned target");
        let start = t.elapsed();
        let after = read_all(addr, &workload, 100).await?;
        let restore_log = second
            .stderr_text()
            .lines()
            .find(|l| l.contains("memory file"))
            .map(str::to_string);
        drop(second);
        anyhow::Ok(RestartReport {
            fill,
            before,
            stop,
            start,
            after,
            save_log,
            restore_log,
        })
    });
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&meta);
    let report = result?;
    for line in report.lines(&workload) {
        println!("{line}");
    }
    println!("command: {command}");
    if let Some(dir) = &args.out {
        write_results(
            dir,
            "restart",
            &report.json(args.spawning.server_memory, &workload),
        )?;
    }
    if report.before.wrong + report.after.wrong > 0 {
        bail!("wrong values were served");
    }
    if report.after.hits != report.before.hits {
        bail!(
            "the restart lost items: {} hits before, {} after",
            report.before.hits,
            report.after.hits
        );
    }
    Ok(())
}

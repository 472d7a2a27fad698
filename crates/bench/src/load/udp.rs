//! `memfleet bench udp`: get latency over UDP and over TCP at the same load
//! (Facebook §3.1 moved gets to UDP to cut latency). The same number of clients, each in a
//! closed loop of one `get` of a random pre-filled key at a time, first over TCP (one
//! connection each), then over UDP (one socket each, memcached's 8-byte framing). Every
//! reply is checked; a UDP request without an answer within 200 ms counts as lost and the
//! client moves on (UDP gives no delivery guarantee; a real client retries or falls back).
//! With `--out DIR`: `udp.json` (the table's rows, with latency CDFs) and
//! `udp-latency-cdf.png`.

use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpStream, UdpSocket};

use super::args::{ClosedLoop, Servers};
use super::run_log::{write_results, RunLog};
use super::table::{self, Column};
use super::workload::{conn_rng, Workload};
use super::{client, cpu, report, runtime, start};
use memfleet_results::plot::Series;

/// `memfleet bench udp`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct UdpArgs {
    /// The servers under test.
    #[command(flatten)]
    pub servers: Servers,
    /// The clients, the keys, the repeats.
    #[command(flatten)]
    pub run: ClosedLoop,
    /// Write udp.json and udp-latency-cdf.png into this directory, with the command that
    /// made them.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
}

/// What one transport measured.
#[derive(Debug, Clone)]
pub struct LatencyResult {
    /// Gets answered.
    pub ops: u64,
    /// Requests without an answer (UDP only).
    pub lost: u64,
    /// Latency percentiles in µs: p50, p90, p99, p99.9.
    pub us: [u64; 4],
    /// Wall time.
    pub elapsed: Duration,
    /// The latency CDF (µs).
    pub latency_cdf: Vec<report::CdfPoint>,
}

impl LatencyResult {
    fn from(h: &Histogram<u64>, lost: u64, elapsed: Duration) -> LatencyResult {
        LatencyResult {
            ops: h.len(),
            lost,
            us: [0.5, 0.9, 0.99, 0.999].map(|q| h.value_at_quantile(q)),
            elapsed,
            latency_cdf: report::histogram_cdf(h, 1.0),
        }
    }
}

const UDP_TIMEOUT: Duration = Duration::from_millis(200);

fn request(w: &Workload, rng: &mut SmallRng) -> (u64, Vec<u8>) {
    let n = w.key(rng);
    (n, format!("get key:{n}\r\n").into_bytes())
}

fn expected(w: &Workload, n: u64) -> Vec<u8> {
    let value = w.value(n);
    let mut want = format!("VALUE key:{n} 0 {}\r\n", value.len()).into_bytes();
    want.extend_from_slice(value);
    want.extend_from_slice(b"\r\nEND\r\n");
    want
}

/// One run's closed-loop clients: `conns` of them, each getting keys of `w` from `addr` one
/// at a time for `duration`, their random streams seeded from `seed`.
struct Clients {
    addr: SocketAddr,
    w: Rc<Workload>,
    conns: usize,
    duration: Duration,
    seed: u64,
}

/// What a client measured: its latencies and how many requests went unanswered.
type Measured = (Histogram<u64>, u64);

impl Clients {
    /// Closed-loop gets over TCP, one connection per client.
    async fn tcp(&self) -> Result<LatencyResult> {
        self.run("tcp client", tcp_connect, tcp_client).await
    }

    /// Closed-loop gets over UDP, one socket per client.
    async fn udp(&self) -> Result<LatencyResult> {
        self.run("udp client", udp_connect, udp_client).await
    }

    /// Starts the clock, then opens each client's socket with `connect` and runs
    /// `client(socket, its loop)` on a local task; merges what they measured.
    async fn run<S, C, F>(
        &self,
        what: &'static str,
        connect: impl Fn(SocketAddr) -> C,
        client: impl Fn(S, ClientLoop) -> F,
    ) -> Result<LatencyResult>
    where
        C: Future<Output = Result<S>>,
        F: Future<Output = Result<Measured>> + 'static,
    {
        let start = Instant::now();
        let end = start + self.duration;
        let mut tasks = Vec::new();
        for id in 0..self.conns {
            let socket = connect(self.addr).await?;
            let client_loop = ClientLoop {
                w: self.w.clone(),
                rng: conn_rng(self.seed, id),
                end,
                h: Histogram::<u64>::new(3).expect("histogram"),
            };
            tasks.push(tokio::task::spawn_local(client(socket, client_loop)));
        }
        let mut all = Histogram::<u64>::new(3).expect("histogram");
        let mut lost = 0;
        for t in tasks {
            let (h, l) = t.await.context(what)??;
            all.add(h)?;
            lost += l;
        }
        Ok(LatencyResult::from(&all, lost, start.elapsed()))
    }
}

/// One client's loop: gets of keys of `w` drawn with `rng` until `end`, their latencies in
/// `h`.
struct ClientLoop {
    w: Rc<Workload>,
    rng: SmallRng,
    end: Instant,
    h: Histogram<u64>,
}

impl ClientLoop {
    /// The next key and its `get`, until the end.
    fn next_request(&mut self) -> Option<(u64, Vec<u8>)> {
        (Instant::now() < self.end).then(|| request(&self.w, &mut self.rng))
    }

    /// Records the latency of a request sent at `t`.
    fn answered(&mut self, t: Instant) {
        let _ = self.h.record((t.elapsed().as_micros() as u64).max(1));
    }
}

/// A TCP connection to `addr`, without Nagle's delay.
async fn tcp_connect(addr: SocketAddr) -> Result<TcpStream> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// A UDP socket on 127.0.0.1 that sends to and hears only `addr`.
async fn udp_connect(addr: SocketAddr) -> Result<UdpSocket> {
    let sock = UdpSocket::bind("127.0.0.1:0").await?;
    sock.connect(addr).await?;
    Ok(sock)
}

/// One TCP client: a get, then its reply, checked.
async fn tcp_client(stream: TcpStream, mut c: ClientLoop) -> Result<Measured> {
    let mut s = BufReader::new(stream);
    let mut got = Vec::new();
    while let Some((n, req)) = c.next_request() {
        let t = Instant::now();
        s.get_mut().write_all(&req).await?;
        got.clear();
        let want = expected(&c.w, n);
        while !got.ends_with(b"END\r\n") || got.len() < want.len() {
            if s.read_until(b'\n', &mut got).await? == 0 {
                bail!("the server closed the connection");
            }
        }
        if got != want {
            bail!("wrong reply over TCP: {:?}", String::from_utf8_lossy(&got));
        }
        c.answered(t);
    }
    Ok((c.h, 0))
}

/// One UDP client: a get in one datagram, then its reply's datagrams, checked; a request
/// not answered within [`UDP_TIMEOUT`] is lost.
async fn udp_client(sock: UdpSocket, mut c: ClientLoop) -> Result<Measured> {
    let mut lost = 0u64;
    let mut request_id: u16 = 0;
    let mut buf = vec![0u8; 2048];
    let mut datagram = Vec::new();
    while let Some((n, req)) = c.next_request() {
        request_id = request_id.wrapping_add(1);
        datagram.clear();
        for word in [request_id, 0, 1, 0] {
            datagram.extend_from_slice(&word.to_be_bytes());
        }
        datagram.extend_from_slice(&req);
        let t = Instant::now();
        sock.send(&datagram).await?;
        let want = expected(&c.w, n);
        let mut parts: Vec<Option<Vec<u8>>> = Vec::new();
        let answered = loop {
            let got = tokio::time::timeout(UDP_TIMEOUT, sock.recv(&mut buf)).await;
            let Ok(len) = got else { break false };
            let len = len?;
            if len < 8 {
                continue;
            }
            let word = |i: usize| u16::from_be_bytes([buf[i], buf[i + 1]]);
            if word(0) != request_id {
                continue; // a late answer to a request given up on
            }
            let (seq, count) = (word(2) as usize, word(4) as usize);
            if parts.is_empty() {
                parts = vec![None; count.max(1)];
            }
            if seq < parts.len() {
                parts[seq] = Some(buf[8..len].to_vec());
            }
            if parts.iter().all(Option::is_some) {
                break true;
            }
        };
        if !answered {
            lost += 1;
            continue;
        }
        let got: Vec<u8> = parts.into_iter().flatten().flatten().collect();
        if got != want {
            bail!("wrong reply over UDP: {:?}", String::from_utf8_lossy(&got));
        }
        c.answered(t);
    }
    Ok((c.h, lost))
}

/// The table's columns.
#[rustfmt::skip]
const COLUMNS: [Column; 8] = [
    Column::left("server", 12), Column::left("via", 5), Column::right("gets/s", 10),
    Column::right("p50 µs", 8), Column::right("p90 µs", 8), Column::right("p99 µs", 8),
    Column::right("p99.9 µs", 8), Column::right("lost", 8),
];

/// One table line.
pub fn line(server: &str, transport: &str, r: &LatencyResult) -> String {
    table::line(
        &COLUMNS,
        &[
            &server,
            &transport,
            &format!("{:.0}", r.ops as f64 / r.elapsed.as_secs_f64().max(1e-9)),
            &r.us[0],
            &r.us[1],
            &r.us[2],
            &r.us[3],
            &r.lost,
        ],
    )
}

/// The table header.
pub fn header() -> String {
    table::heading(&COLUMNS)
}

/// `memfleet bench udp`: per target, pre-fill, then `--repeat` pairs of runs (TCP, then UDP) with
/// the same clients, keys and duration; the table shows the run with the median p50 of each.
pub fn bench(args: &UdpArgs) -> Result<()> {
    if args.servers.targets.is_empty() {
        bail!("nothing to load: give --spawn memcached|memfleet or --target NAME=HOST:PORT");
    }
    if args.run.repeat == 0 || args.run.clients.duration.is_zero() || args.run.clients.conns == 0 {
        bail!("--repeat, --duration and --conns must be positive");
    }
    let workload = Rc::new(args.run.keys.gets_workload("udp", args.run.keys.zipf)?);
    let log = RunLog::new();
    println!(
        "memfleet bench udp: {} clients, one get at a time each, {} keys, \
         {}-byte values, {:?} per run, {} repeat(s)",
        args.run.clients.conns,
        args.run.keys.keys,
        args.run.keys.value_size,
        args.run.clients.duration,
        args.run.repeat
    );
    log.print_start();
    let settings = args.servers.spawning.settings(true, workload.value_size());
    let (client_pin, server_pin) = args.servers.pinning.pins();
    let _pinned = client_pin.map(cpu::pin_this_thread).transpose()?;
    let targets = args.servers.targets.list();
    let (rt, local) = runtime()?;
    // The table's rows: (target, transport, the run with the median p50).
    let mut medians: Vec<(String, &str, LatencyResult)> = Vec::new();
    local.block_on(&rt, async {
        for t in &targets {
            let (spawned, addr) = start(t, &settings, server_pin, &[])?;
            client::prefill(addr, &workload, 100).await?;
            let (mut tcp_runs, mut udp_runs) = (Vec::new(), Vec::new());
            for r in 1..=args.run.repeat {
                let clients = Clients {
                    addr,
                    w: workload.clone(),
                    conns: args.run.clients.conns,
                    duration: args.run.clients.duration,
                    seed: args.run.seed.wrapping_add(r as u64),
                };
                let tcp = clients
                    .tcp()
                    .await
                    .with_context(|| format!("{} over TCP", t.name()))?;
                println!("[{}] run {r}: {}", t.name(), line(t.name(), "tcp", &tcp));
                let over_udp = clients
                    .udp()
                    .await
                    .with_context(|| format!("{} over UDP", t.name()))?;
                println!(
                    "[{}] run {r}: {}",
                    t.name(),
                    line(t.name(), "udp", &over_udp)
                );
                tcp_runs.push(tcp);
                udp_runs.push(over_udp);
            }
            for (via, mut runs) in [("tcp", tcp_runs), ("udp", udp_runs)] {
                runs.sort_by_key(|r| r.us[0]);
                let median = runs.swap_remove(runs.len() / 2);
                medians.push((t.name().to_string(), via, median));
            }
            drop(spawned);
        }
        anyhow::Ok(())
    })?;
    println!();
    if args.run.repeat > 1 {
        println!("median (by p50) of {} runs:", args.run.repeat);
    }
    println!("{}", header());
    for (server, via, r) in &medians {
        println!("{}", line(server, via, r));
    }
    let load_at_end = log.print_end();
    if let Some(dir) = &args.out {
        let value = json_report(args, &medians, &load_at_end);
        write_results(dir, "udp", &value)?;
        let lines: Vec<Series> = medians
            .iter()
            .filter(|(_, _, r)| !r.latency_cdf.is_empty())
            .map(|(server, via, r)| report::cdf_series(format!("{server} {via}"), &r.latency_cdf))
            .collect();
        let figure = dir.join("udp-latency-cdf.png");
        memfleet_results::plot::latency_cdf(
            &figure,
            "Get latency CDF, TCP vs UDP (Facebook §3.1)",
            &lines,
        )?;
        println!("figure: {}", figure.display());
    }
    Ok(())
}

/// `udp.json`: the parameters and the table's rows with their latency CDFs.
fn json_report(
    args: &UdpArgs,
    medians: &[(String, &str, LatencyResult)],
    load_at_end: &str,
) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = medians
        .iter()
        .map(|(server, via, r)| {
            json!({
                "server": server,
                "transport": via,
                "gets": r.ops,
                "gets_per_s": r.ops as f64 / r.elapsed.as_secs_f64().max(1e-9),
                "lost": r.lost,
                "latency_p50_us": r.us[0],
                "latency_p90_us": r.us[1],
                "latency_p99_us": r.us[2],
                "latency_p999_us": r.us[3],
                "latency_cdf": r.latency_cdf,
            })
        })
        .collect();
    let mut parameters = args
        .run
        .parameters("the run with the median p50 of each server and transport");
    parameters["udp_timeout_ms"] = json!(UDP_TIMEOUT.as_secs_f64() * 1000.0);
    json!({
        "parameters": parameters,
        "load_average_at_end": load_at_end,
        "rows": rows,
    })
}

//! Steady client traffic through a router, every request timed and its outcome kept, so a
//! fault test can say what the fault cost: which keys failed, how many times, for how long,
//! and how slow the slowest request was.
//!
//! Each client is one thread with one connection sending `set`s one at a time (a small
//! pause between them keeps the load modest on a shared machine). A reply that does not
//! come within [`HANG`] is a hang: the router promised an answer within its timeouts, so a
//! test asserts there is none.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a client waits for a reply before calling the request hung.
pub const HANG: Duration = Duration::from_secs(5);
/// Pause between one client's requests.
const PACE: Duration = Duration::from_millis(2);

/// What became of one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `STORED`.
    Stored,
    /// `SERVER_ERROR ...`: the router could not reach the key's server (down, timeout).
    ServerError,
    /// No connection to the router (refused, reset, closed).
    Refused,
    /// No reply within [`HANG`].
    Hung,
    /// Any other reply.
    Unexpected(String),
}

/// One request.
#[derive(Clone, Debug)]
pub struct Sample {
    /// When it was sent, since the traffic started.
    pub at: Duration,
    /// Index of its key.
    pub key: usize,
    /// Its outcome.
    pub outcome: Outcome,
    /// How long it took.
    pub latency: Duration,
}

/// Clients sending sets until stopped.
pub struct Traffic {
    started: Instant,
    stop: Arc<AtomicBool>,
    clients: Vec<JoinHandle<Vec<Sample>>>,
}

impl Traffic {
    /// `clients` connections to `router`, each setting `keys` round robin (client `i`
    /// starts at key `i`).
    pub fn start(router: SocketAddr, keys: &[String], clients: usize) -> Traffic {
        let started = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let keys = Arc::new(keys.to_vec());
        let clients = (0..clients)
            .map(|first| {
                let (stop, keys) = (stop.clone(), keys.clone());
                std::thread::spawn(move || client(router, &keys, first, clients, started, &stop))
            })
            .collect();
        Traffic {
            started,
            stop,
            clients,
        }
    }

    /// Time since the traffic started (the clock of [`Sample::at`]).
    pub fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// Stops every client and returns all samples, in the order they were sent.
    pub fn stop(self) -> Samples {
        self.stop.store(true, Ordering::Relaxed);
        let mut all: Vec<Sample> = self
            .clients
            .into_iter()
            .flat_map(|c| c.join().expect("a traffic client panicked"))
            .collect();
        all.sort_by_key(|s| s.at);
        Samples(all)
    }
}

fn client(
    router: SocketAddr,
    keys: &[String],
    first: usize,
    step: usize,
    started: Instant,
    stop: &AtomicBool,
) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut conn: Option<BufReader<TcpStream>> = None;
    let mut key = first % keys.len();
    while !stop.load(Ordering::Relaxed) {
        let at = started.elapsed();
        let outcome = set(&mut conn, router, &keys[key]);
        let latency = started.elapsed() - at;
        let pause = if outcome == Outcome::Refused {
            Duration::from_millis(20)
        } else {
            PACE
        };
        samples.push(Sample {
            at,
            key,
            outcome,
            latency,
        });
        key = (key + step) % keys.len();
        std::thread::sleep(pause);
    }
    samples
}

/// One `set` on `conn` (connecting first if needed); a broken connection is dropped, to be
/// made again by the next request.
fn set(conn: &mut Option<BufReader<TcpStream>>, router: SocketAddr, key: &str) -> Outcome {
    if conn.is_none() {
        match TcpStream::connect_timeout(&router, Duration::from_secs(1)) {
            Ok(s) => {
                s.set_read_timeout(Some(HANG)).unwrap();
                *conn = Some(BufReader::new(s));
            }
            Err(_) => return Outcome::Refused,
        }
    }
    let c = conn.as_mut().expect("connected above");
    let mut line = String::new();
    let request = format!("set {key} 0 0 5\r\nvalue\r\n");
    let outcome = match c
        .get_mut()
        .write_all(request.as_bytes())
        .and_then(|()| c.read_line(&mut line))
    {
        Ok(0) => Outcome::Refused,
        Ok(_) if line == "STORED\r\n" => Outcome::Stored,
        Ok(_) if line.starts_with("SERVER_ERROR ") => Outcome::ServerError,
        Ok(_) => Outcome::Unexpected(line),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Outcome::Hung,
        Err(_) => Outcome::Refused,
    };
    if !matches!(outcome, Outcome::Stored | Outcome::ServerError) {
        *conn = None;
    }
    outcome
}

/// Every request of a run.
pub struct Samples(pub Vec<Sample>);

/// Counts over a set of samples.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Requests.
    pub requests: usize,
    /// `SERVER_ERROR` replies.
    pub server_errors: usize,
    /// Requests without a connection.
    pub refused: usize,
    /// Requests without a reply in [`HANG`].
    pub hung: usize,
    /// Any other reply.
    pub unexpected: usize,
    /// The slowest request.
    pub max_latency: Duration,
    /// The slowest request that got an error (a timeout shows here).
    pub max_error_latency: Duration,
    /// Errors that took at least half the router's timeout (timeouts, not fast failures).
    pub slow_errors: usize,
}

impl Tally {
    /// Requests that did not store.
    pub fn failures(&self) -> usize {
        self.server_errors + self.refused + self.hung + self.unexpected
    }
}

impl Samples {
    /// Tallies the samples sent in `[from, to)` whose key `keep` selects; an error slower
    /// than `slow` counts as a slow one.
    pub fn tally(
        &self,
        from: Duration,
        to: Duration,
        slow: Duration,
        keep: impl Fn(usize) -> bool,
    ) -> Tally {
        let mut t = Tally::default();
        for s in self
            .0
            .iter()
            .filter(|s| s.at >= from && s.at < to && keep(s.key))
        {
            t.requests += 1;
            t.max_latency = t.max_latency.max(s.latency);
            match &s.outcome {
                Outcome::Stored => continue,
                Outcome::ServerError => t.server_errors += 1,
                Outcome::Refused => t.refused += 1,
                Outcome::Hung => t.hung += 1,
                Outcome::Unexpected(line) => {
                    eprintln!("unexpected reply {line:?}");
                    t.unexpected += 1
                }
            }
            t.max_error_latency = t.max_error_latency.max(s.latency);
            if s.latency >= slow {
                t.slow_errors += 1;
            }
        }
        t
    }

    /// When the first request after `from` whose key `keep` selects stored, if one did.
    pub fn first_stored_after(
        &self,
        from: Duration,
        keep: impl Fn(usize) -> bool,
    ) -> Option<Duration> {
        self.0
            .iter()
            .find(|s| s.at >= from && keep(s.key) && s.outcome == Outcome::Stored)
            .map(|s| s.at)
    }

    /// The failed requests sent in `[from, to)` whose key `keep` selects (for messages).
    pub fn failures(
        &self,
        from: Duration,
        to: Duration,
        keep: impl Fn(usize) -> bool,
    ) -> Vec<&Sample> {
        self.0
            .iter()
            .filter(|s| s.at >= from && s.at < to && keep(s.key) && s.outcome != Outcome::Stored)
            .take(5)
            .collect()
    }
}

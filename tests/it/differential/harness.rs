//! The machinery: cases and steps, server processes, one connection per case, the sentinel
//! read, and the mismatch report.

use memfleet_testkit::free_port;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::differential::normalize;

/// Builds a step's bytes from the CAS values this server has shown so far in the case
/// (in order of first appearance; see rule `cas-*` in the exceptions table).
pub type BuildFn = Box<dyn Fn(&[u64]) -> Vec<u8> + Send + Sync>;

/// Which protocol a case speaks (memcached picks it from a connection's first byte).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Proto {
    /// Classic text and meta commands.
    Text,
    /// The binary protocol.
    Binary,
}

/// How the end of a step's reply is recognised.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// A sentinel request (`mn`, or a binary NOOP) follows the step's bytes; the reply is
    /// complete when the sentinel's answer arrives.
    Sentinel,
    /// The server is expected to hang up: read until EOF (no sentinel, which would be
    /// swallowed by the unfinished line or turn a close into a reset).
    Close,
    /// Nothing (or nothing final) comes back, e.g. half a request: read for this long.
    Idle(Duration),
}

/// One write and the reply to it.
pub struct Step {
    build: BuildFn,
    mode: Mode,
    pause: Duration,
    preview: Vec<u8>,
}

/// A named list of steps, run on one fresh connection to each server after `flush_all`.
pub struct Case {
    /// Group and number, then the start of the first request.
    pub name: String,
    proto: Proto,
    steps: Vec<Step>,
}

/// Replaces `$C<n>` with the n-th CAS value this server showed in the case, and `$X<n>` with a
/// value that is certainly not that CAS (for "stale token" requests).
fn substitute(template: &[u8], cas: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(template.len());
    let mut i = 0;
    while i < template.len() {
        let b = template[i];
        if b == b'$' && matches!(template.get(i + 1), Some(b'C' | b'X')) {
            let digits = template[i + 2..]
                .iter()
                .take_while(|d| d.is_ascii_digit())
                .count();
            if digits > 0 {
                let n: usize = std::str::from_utf8(&template[i + 2..i + 2 + digits])
                    .unwrap()
                    .parse()
                    .unwrap();
                match cas.get(n) {
                    Some(&v) if template[i + 1] == b'C' => {
                        out.extend_from_slice(v.to_string().as_bytes())
                    }
                    // Flipping bit 62 gives a token no server has issued for this item.
                    Some(&v) => out.extend_from_slice((v ^ (1 << 62)).to_string().as_bytes()),
                    None => out.extend_from_slice(b"NO_SUCH_CAS"),
                }
                i += 2 + digits;
                continue;
            }
        }
        out.push(b);
        i += 1;
    }
    out
}

/// A text step (the bytes may hold `$C<n>`/`$X<n>` CAS references) read up to the sentinel.
pub fn text(bytes: impl AsRef<[u8]>) -> Step {
    let t = bytes.as_ref().to_vec();
    let preview = t.clone();
    Step {
        build: Box::new(move |cas| substitute(&t, cas)),
        mode: Mode::Sentinel,
        pause: Duration::ZERO,
        preview,
    }
}

/// A text step whose bytes are made when it is sent (for absolute times).
pub fn text_at_send(f: impl Fn() -> Vec<u8> + Send + Sync + 'static) -> Step {
    let preview = f();
    Step {
        build: Box::new(move |cas| substitute(&f(), cas)),
        mode: Mode::Sentinel,
        pause: Duration::ZERO,
        preview,
    }
}

/// A binary step built from the CAS values seen so far.
pub fn binary(f: impl Fn(&[u64]) -> Vec<u8> + Send + Sync + 'static) -> Step {
    let preview = f(&[]);
    Step {
        build: Box::new(f),
        mode: Mode::Sentinel,
        pause: Duration::ZERO,
        preview,
    }
}

impl Step {
    /// The server should close the connection after these bytes.
    pub fn closes(mut self) -> Self {
        self.mode = Mode::Close;
        self
    }

    /// No complete answer is expected: collect what arrives in 300 ms.
    pub fn idle(mut self) -> Self {
        self.mode = Mode::Idle(Duration::from_millis(300));
        self
    }

    /// Waits this long before sending (for expiry that needs the clock to move).
    pub fn after(mut self, pause: Duration) -> Self {
        self.pause = pause;
        self
    }
}

/// Cases under one name prefix, numbered in order.
pub struct Group {
    prefix: &'static str,
    proto: Proto,
    /// The cases added so far.
    pub cases: Vec<Case>,
}

impl Group {
    /// A text-protocol group.
    pub fn text(prefix: &'static str) -> Self {
        Group {
            prefix,
            proto: Proto::Text,
            cases: Vec::new(),
        }
    }

    /// A binary-protocol group.
    pub fn binary(prefix: &'static str) -> Self {
        Group {
            prefix,
            proto: Proto::Binary,
            cases: Vec::new(),
        }
    }

    /// A case of several steps on one connection.
    pub fn case(&mut self, steps: Vec<Step>) {
        self.named("", steps);
    }

    /// A case with a descriptive name.
    pub fn named(&mut self, label: &str, steps: Vec<Step>) {
        let n = self.cases.len() + 1;
        let name = if label.is_empty() {
            let first = &steps[0].preview;
            let shown = escape(&first[..first.len().min(48)]);
            let more = if first.len() > 48 { "..." } else { "" };
            format!("{}/{n:03} \"{shown}{more}\"", self.prefix)
        } else {
            format!("{}/{n:03} {label}", self.prefix)
        };
        self.cases.push(Case {
            name,
            proto: self.proto,
            steps,
        });
    }

    /// One text step, read up to the sentinel.
    pub fn c(&mut self, bytes: impl AsRef<[u8]>) {
        self.case(vec![text(bytes)]);
    }

    /// One text step after which the server hangs up.
    pub fn closes(&mut self, bytes: impl AsRef<[u8]>) {
        self.case(vec![text(bytes).closes()]);
    }

    /// One text step with no complete answer.
    pub fn idle(&mut self, bytes: impl AsRef<[u8]>) {
        self.case(vec![text(bytes).idle()]);
    }
}

/// `parts` joined.
pub fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// How a step's read ended.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum End {
    /// The sentinel's answer arrived.
    Complete,
    /// The server closed the connection (EOF or reset).
    Closed,
    /// The idle time passed with the connection still open.
    Open,
    /// No sentinel answer, no close, within the time limit.
    Timeout,
    /// Not run: the connection had closed in an earlier step.
    NotRun,
}

/// What one server did with one step.
pub struct StepOutcome {
    /// The bytes sent, sentinel included.
    pub sent: Vec<u8>,
    /// The reply after normalization (see the exceptions table).
    pub reply: Vec<u8>,
    /// How reading ended.
    pub end: End,
}

/// What one server did with one case.
pub struct CaseOutcome {
    /// Set when the `flush_all` before the case failed.
    pub setup_error: Option<String>,
    /// One per step.
    pub steps: Vec<StepOutcome>,
}

const TEXT_SENTINEL: &[u8] = b"mn\r\n";
/// The opaque of the binary sentinel NOOP: no case uses it.
pub const SENTINEL_OPAQUE: u32 = 0x5e_47_1e_11;
const SENTINEL_WAIT: Duration = Duration::from_secs(2);
/// After this many sentinel timeouts a server is clearly not answering: later waits are cut
/// to `SHORT_WAIT` so that a broken run still ends quickly (the reports say "Timeout").
const TIMEOUTS_BEFORE_SHORT_WAIT: usize = 3;
const SHORT_WAIT: Duration = Duration::from_millis(300);
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// A binary protocol request.
pub fn bin_request(
    op: u8,
    key: &[u8],
    extras: &[u8],
    value: &[u8],
    opaque: u32,
    cas: u64,
) -> Vec<u8> {
    let body = extras.len() + key.len() + value.len();
    let mut p = Vec::with_capacity(24 + body);
    p.push(0x80);
    p.push(op);
    p.extend_from_slice(&(key.len() as u16).to_be_bytes());
    p.push(extras.len() as u8);
    p.push(0); // data type
    p.extend_from_slice(&[0, 0]); // vbucket
    p.extend_from_slice(&(body as u32).to_be_bytes());
    p.extend_from_slice(&opaque.to_be_bytes());
    p.extend_from_slice(&cas.to_be_bytes());
    p.extend_from_slice(extras);
    p.extend_from_slice(key);
    p.extend_from_slice(value);
    p
}

/// How many `MN` replies a text stream asks for: lines that start with `mn`. (Good enough
/// for a corpus that never puts such a line inside a data block.)
fn count_mn(sent: &[u8]) -> usize {
    let mut n = 0;
    let mut at_line_start = true;
    for (i, &b) in sent.iter().enumerate() {
        if at_line_start
            && sent[i..].starts_with(b"mn")
            && matches!(sent.get(i + 2), Some(b'\r' | b'\n' | b' '))
        {
            n += 1;
        }
        at_line_start = b == b'\n';
    }
    n
}

fn count_occurrences(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

/// Whether `reply` ends with the binary sentinel's complete NOOP response.
fn binary_complete(reply: &[u8]) -> bool {
    let mut pos = 0;
    let mut last_is_sentinel = false;
    while reply.len() - pos >= 24 {
        let h = &reply[pos..pos + 24];
        let body = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
        if reply.len() - pos < 24 + body {
            return false;
        }
        last_is_sentinel = h[0] == 0x81
            && h[1] == 0x0a
            && u32::from_be_bytes([h[12], h[13], h[14], h[15]]) == SENTINEL_OPAQUE;
        pos += 24 + body;
    }
    pos == reply.len() && last_is_sentinel
}

/// Sends `bytes` and reads the reply as `mode` says.
fn exchange(
    conn: &mut TcpStream,
    bytes: &[u8],
    mode: Mode,
    proto: Proto,
    sentinel_wait: Duration,
) -> (Vec<u8>, End) {
    let wanted_mn = count_mn(bytes);
    let mut reply = Vec::new();
    let mut end = None;
    std::thread::scope(|s| {
        // A large write goes on its own thread so that a server replying while it reads
        // cannot fill both socket buffers and deadlock with us.
        if bytes.len() > 64 * 1024 {
            let mut w = conn.try_clone().expect("clone socket");
            s.spawn(move || {
                let _ = w.write_all(bytes);
            });
        } else {
            // A write error means the server closed early: the read below sees it.
            let _ = conn.write_all(bytes);
        }
        let wait = match mode {
            Mode::Sentinel => sentinel_wait,
            Mode::Close => CLOSE_WAIT,
            Mode::Idle(d) => d,
        };
        let deadline = Instant::now() + wait;
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                end = Some(if mode == Mode::Sentinel {
                    End::Timeout
                } else {
                    End::Open
                });
                break;
            }
            conn.set_read_timeout(Some(left)).unwrap();
            match conn.read(&mut buf) {
                Ok(0) => {
                    end = Some(End::Closed);
                    break;
                }
                Ok(n) => {
                    reply.extend_from_slice(&buf[..n]);
                    let done = mode == Mode::Sentinel
                        && match proto {
                            Proto::Text => {
                                reply.ends_with(b"MN\r\n")
                                    && count_occurrences(&reply, b"MN\r\n") >= wanted_mn
                            }
                            Proto::Binary => binary_complete(&reply),
                        };
                    if done {
                        end = Some(End::Complete);
                        break;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(_) => {
                    // Reset or aborted: the server hung up with our bytes unread.
                    end = Some(End::Closed);
                    break;
                }
            }
        }
        if end != Some(End::Complete) && bytes.len() > 64 * 1024 {
            // Unblock a writer still stuck on a server that stopped reading.
            let _ = conn.shutdown(std::net::Shutdown::Both);
        }
    });
    (reply, end.unwrap())
}

/// A server process on a loopback port, killed on drop.
pub struct Server {
    /// Name used in reports.
    pub label: String,
    /// Where it listens.
    pub addr: SocketAddr,
    child: Child,
    log: PathBuf,
}

impl Server {
    /// Starts `program` with `args(port)` and waits until it accepts connections.
    pub fn start(
        label: &str,
        program: &Path,
        args: impl Fn(u16) -> Vec<String>,
    ) -> Result<Server, String> {
        let mut last_error = String::new();
        for _attempt in 0..3 {
            let port = free_port();
            let log = std::env::temp_dir().join(format!(
                "memfleet-differential-{}-{label}-{port}.log",
                std::process::id()
            ));
            let log_file = std::fs::File::create(&log).map_err(|e| e.to_string())?;
            let child = Command::new(program)
                .args(args(port))
                .stdin(Stdio::null())
                .stdout(log_file.try_clone().map_err(|e| e.to_string())?)
                .stderr(log_file)
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
            let mut server = Server {
                label: label.to_string(),
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
                child,
                log,
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if TcpStream::connect(server.addr).is_ok() {
                    return Ok(server);
                }
                if let Ok(Some(status)) = server.child.try_wait() {
                    last_error = format!(
                        "{label} ({} {}) exited with {status} before accepting; its output:\n{}",
                        program.display(),
                        args(port).join(" "),
                        std::fs::read_to_string(&server.log).unwrap_or_default()
                    );
                    break;
                }
                if Instant::now() > deadline {
                    last_error = format!("{label} did not accept on port {port} within 10 s");
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Err(last_error)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Empties the cache and resets verbosity before a case, on a connection kept for that.
fn reset(control: &mut Option<TcpStream>, addr: SocketAddr) -> Result<(), String> {
    if control.is_none() {
        let c = TcpStream::connect(addr).map_err(|e| format!("control connect: {e}"))?;
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        *control = Some(c);
    }
    let c = control.as_mut().unwrap();
    let want = b"OK\r\nOK\r\n";
    let result = (|| {
        c.write_all(b"flush_all\r\nverbosity 0\r\n")?;
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        while got.len() < want.len() {
            let n = c.read(&mut buf)?;
            if n == 0 {
                return Err(std::io::Error::new(ErrorKind::UnexpectedEof, "closed"));
            }
            got.extend_from_slice(&buf[..n]);
        }
        Ok(got)
    })();
    match result {
        Ok(got) if got == want => Ok(()),
        Ok(got) => {
            *control = None;
            Err(format!(
                "flush_all + verbosity 0 replied \"{}\"",
                escape(&got)
            ))
        }
        Err(e) => {
            *control = None;
            Err(format!("flush_all + verbosity 0 failed: {e}"))
        }
    }
}

/// Runs every case on a fresh connection to `server`.
pub fn run_cases(server: &Server, cases: &[Case]) -> Vec<CaseOutcome> {
    let mut control = None;
    let mut timeouts = 0;
    let mut out = Vec::with_capacity(cases.len());
    for case in cases {
        let setup_error = reset(&mut control, server.addr).err();
        let mut conn = match TcpStream::connect(server.addr) {
            Ok(c) => Some(c),
            Err(e) => {
                out.push(CaseOutcome {
                    setup_error: Some(format!("connect: {e}")),
                    steps: Vec::new(),
                });
                continue;
            }
        };
        if let Some(c) = &conn {
            c.set_nodelay(true).unwrap();
        }
        let mut cas = Vec::new();
        let mut steps = Vec::with_capacity(case.steps.len());
        for step in &case.steps {
            let mut sent = (step.build)(&cas);
            let Some(c) = conn.as_mut() else {
                steps.push(StepOutcome {
                    sent,
                    reply: Vec::new(),
                    end: End::NotRun,
                });
                continue;
            };
            std::thread::sleep(step.pause);
            if step.mode == Mode::Sentinel {
                match case.proto {
                    Proto::Text => sent.extend_from_slice(TEXT_SENTINEL),
                    Proto::Binary => {
                        sent.extend(bin_request(0x0a, b"", b"", b"", SENTINEL_OPAQUE, 0))
                    }
                }
            }
            let wait = if timeouts < TIMEOUTS_BEFORE_SHORT_WAIT {
                SENTINEL_WAIT
            } else {
                SHORT_WAIT
            };
            let (raw, end) = exchange(c, &sent, step.mode, case.proto, wait);
            if end == End::Timeout {
                timeouts += 1;
            }
            let reply = match case.proto {
                Proto::Text => normalize::text(&raw, &mut cas),
                Proto::Binary => normalize::binary(&raw, &mut cas, true),
            };
            if matches!(end, End::Closed | End::Timeout) {
                conn = None;
            }
            steps.push(StepOutcome { sent, reply, end });
        }
        out.push(CaseOutcome { setup_error, steps });
    }
    out
}

/// `bytes` as a Rust-like string literal body.
pub fn escape(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n"),
            b'\t' => s.push_str("\\t"),
            b'\0' => s.push_str("\\0"),
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    s
}

/// `bytes` escaped, long runs cut, keeping the region around `focus` visible.
fn show(bytes: &[u8], focus: usize) -> String {
    const HEAD: usize = 160;
    const WINDOW: usize = 240;
    if bytes.len() <= HEAD + WINDOW + 80 {
        return format!("\"{}\"", escape(bytes));
    }
    let from = focus.saturating_sub(WINDOW / 3);
    let to = (from + WINDOW).max(HEAD).min(bytes.len());
    let mut s = if from <= HEAD {
        format!("\"{}\"", escape(&bytes[..to]))
    } else {
        format!(
            "\"{}\" ...({} bytes)... \"{}\"",
            escape(&bytes[..HEAD]),
            from - HEAD,
            escape(&bytes[from..to])
        )
    };
    if to < bytes.len() {
        s += &format!(" ...({} more bytes)", bytes.len() - to);
    }
    s + &format!(" [{} bytes]", bytes.len())
}

fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    if a == b {
        return None;
    }
    Some(a.iter().zip(b).take_while(|(x, y)| x == y).count())
}

/// The `STAT` names that appear in only one of two replies (for readable stats reports).
fn stat_names_difference(a: &[u8], b: &[u8]) -> (Vec<String>, Vec<String>) {
    let names = |r: &[u8]| -> Vec<String> {
        String::from_utf8_lossy(r)
            .lines()
            .filter_map(|l| l.strip_prefix("STAT "))
            .filter_map(|l| l.split(' ').next())
            .map(String::from)
            .collect()
    };
    let (na, nb) = (names(a), names(b));
    let only = |x: &[String], y: &[String]| x.iter().filter(|n| !y.contains(n)).cloned().collect();
    (only(&na, &nb), only(&nb, &na))
}

/// Compares the two servers' outcomes; returns one report per mismatching step.
pub fn compare(
    cases: &[Case],
    reference: (&str, &[CaseOutcome]),
    subject: (&str, &[CaseOutcome]),
) -> Vec<String> {
    let (rl, ro) = reference;
    let (sl, so) = subject;
    let w = rl.len().max(sl.len());
    let mut reports = Vec::new();
    for ((case, r), s) in cases.iter().zip(ro).zip(so) {
        if r.setup_error.is_some() || s.setup_error.is_some() {
            reports.push(format!(
                "{}\n  setup  {rl}: {:?}\n  setup  {sl}: {:?}",
                case.name, r.setup_error, s.setup_error
            ));
        }
        if let Some((_, why)) = crate::differential::DEFERRED
            .iter()
            .find(|(name, _)| case.name.contains(name))
        {
            eprintln!("deferred (not compared): {}: {why}", case.name);
            continue;
        }
        let n = case.steps.len();
        for (i, (rs, ss)) in r.steps.iter().zip(&s.steps).enumerate() {
            let reference_broke = rs.end == End::Timeout;
            let (r_reply, s_reply) = normalize::shared_stats(&rs.reply, &ss.reply);
            if r_reply == s_reply && rs.end == ss.end && !reference_broke {
                continue;
            }
            let at = first_difference(&rs.reply, &ss.reply);
            let mut m = format!("{}  (step {} of {n})\n", case.name, i + 1);
            if reference_broke {
                m += &format!(
                    "  HARNESS/CORPUS ERROR: {rl} itself did not answer the sentinel in time\n"
                );
            }
            // Binary streams are rendered frame by frame, one per line.
            let frames = |bytes: &[u8]| {
                String::from_utf8_lossy(bytes)
                    .trim_end()
                    .replace('\n', "\n      ")
            };
            let request = |sent: &[u8]| match case.proto {
                Proto::Text => show(sent, 0),
                Proto::Binary => frames(&normalize::binary(sent, &mut Vec::new(), false)),
            };
            let focus = at.unwrap_or(0);
            let reply = |reply: &[u8]| match case.proto {
                Proto::Text => show(reply, focus),
                Proto::Binary => frames(reply),
            };
            m += &format!("  request {rl:w$} {}\n", request(&rs.sent));
            if ss.sent != rs.sent {
                m += &format!("  request {sl:w$} {}\n", request(&ss.sent));
            }
            m += &format!("  reply   {rl:w$} {} [{:?}]\n", reply(&rs.reply), rs.end);
            m += &format!("  reply   {sl:w$} {} [{:?}]\n", reply(&ss.reply), ss.end);
            let (only_r, only_s) = stat_names_difference(&rs.reply, &ss.reply);
            if !only_r.is_empty() || !only_s.is_empty() {
                m += &format!("  STAT names only from {rl}: {}\n", only_r.join(" "));
                m += &format!("  STAT names only from {sl}: {}\n", only_s.join(" "));
            }
            match at {
                Some(at) => {
                    m += &format!("  first difference at byte {at} of the normalized replies")
                }
                None => m += "  replies equal; the connections ended differently",
            }
            reports.push(m);
        }
    }
    reports
}

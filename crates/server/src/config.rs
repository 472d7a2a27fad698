//! The server's settings: command-line flags (memcached's letters where memcached has one),
//! environment variables (`MEMFLEET_*`), an optional TOML file, and the defaults, in that
//! order of precedence. Each setting is declared once, in [`ServerArgs`]: clap reads it from
//! the command line and the environment, serde from the file (the same names, `_` for `-`),
//! and [`Settings::resolve`] checks the merged result into [`Settings`], what the rest of
//! the server reads.

use anyhow::{bail, Context};
use clap::Args;
use memfleet_tls::ServerTlsFiles;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Flags of `memfleet server`. Every flag can also come from the environment (shown in
/// `--help`) or from the `--config` TOML file (same names, with `_` for `-`; all but `-o` and
/// `--config`).
#[derive(Args, Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerArgs {
    /// TCP port to listen on (memcached's -p) [default: 11211].
    #[arg(short = 'p', long, env = "MEMFLEET_PORT")]
    pub port: Option<u16>,

    /// Address to listen on (memcached's -l). Only loopback by default: a cache has no
    /// authentication, so exposing it is a deliberate choice [default: 127.0.0.1].
    #[arg(short = 'l', long, env = "MEMFLEET_LISTEN")]
    pub listen: Option<IpAddr>,

    /// Memory for items, in MiB (memcached's -m). Allocated once at start-up as the segment
    /// heap; the hash table and connection buffers come on top [default: 64].
    #[arg(short = 'm', long = "memory-limit", env = "MEMFLEET_MEMORY_LIMIT")]
    pub memory_limit: Option<usize>,

    /// Most simultaneous client connections (memcached's -c). A connection over the limit is
    /// told `ERROR Too many open connections` and closed [default: 1024].
    #[arg(
        short = 'c',
        long = "max-connections",
        env = "MEMFLEET_MAX_CONNECTIONS"
    )]
    pub max_connections: Option<usize>,

    /// Worker threads, each with its own event loop and listening socket (SO_REUSEPORT)
    /// [default: one per core].
    #[arg(short = 't', long, env = "MEMFLEET_THREADS")]
    pub threads: Option<usize>,

    /// Largest item (key, value and memcached's per-item overhead), like memcached's -I:
    /// bytes, or with a k/m suffix. Between 1k and 1024m [default: 1m].
    #[arg(short = 'I', long = "max-item-size", env = "MEMFLEET_MAX_ITEM_SIZE")]
    #[serde(deserialize_with = "size_text")]
    pub max_item_size: Option<String>,

    /// Close connections idle for this many seconds; 0 never does (memcached's
    /// `-o idle_timeout`) [default: 0].
    #[arg(long = "idle-timeout", env = "MEMFLEET_IDLE_TIMEOUT")]
    pub idle_timeout: Option<u64>,

    /// Keep the item memory in this file (on tmpfs, e.g. /dev/shm/memfleet) so that a
    /// restart serves the same items: a graceful stop (SIGTERM, SIGINT, SIGUSR1) saves
    /// PATH.meta, the next start with the same file and memory size restores it. After a
    /// crash, an upgrade to a release with another snapshot format or a size change it
    /// starts empty (an upgrade of the same format comes back warm).
    #[arg(long = "memory-file", env = "MEMFLEET_MEMORY_FILE")]
    pub memory_file: Option<PathBuf>,

    /// Serve gets (get, gets, mg) over UDP on this port, memcached's framing (memcached's
    /// -U); 0 or absent: no UDP. Read the amplification warning in docs/server.md (UDP) first: only
    /// on a network where source addresses cannot be spoofed [default: off].
    #[arg(short = 'U', long = "udp-port", env = "MEMFLEET_UDP_PORT")]
    pub udp_port: Option<u16>,

    /// Serve every command over UDP, writes included, as memcached's -U does (set, delete,
    /// incr, touch, meta commands, the binary protocol, several commands per datagram).
    /// Anyone who can send a datagram, from any claimed source address, can then change the
    /// cache: only on a trusted network. Needs --udp-port [default: off, UDP serves reads].
    #[arg(long = "udp-writes", env = "MEMFLEET_UDP_WRITES")]
    pub udp_writes: bool,

    /// Seconds a lease token is the only one for its key (`lease-get`, meta `mg N`/`R`):
    /// other misses meanwhile are hot misses, told to retry; after it the next miss gets a
    /// new token, so a client that died holding one blocks the key no longer [default: 10].
    #[arg(long = "lease-interval", env = "MEMFLEET_LEASE_INTERVAL")]
    pub lease_interval: Option<u32>,

    /// Seconds a deleted value stays behind as stale for lease reads (`lease-get`, `mg N`),
    /// which may serve it marked stale while one client refreshes it; plain gets miss it at
    /// once. 0 drops values at delete, as memcached does [default: 10].
    #[arg(long = "stale-after-delete", env = "MEMFLEET_STALE_AFTER_DELETE")]
    pub stale_after_delete: Option<u32>,

    /// Serve Prometheus metrics over HTTP at /metrics on this port (same address as
    /// --listen); off unless given.
    #[arg(long = "admin-port", env = "MEMFLEET_ADMIN_PORT")]
    pub admin_port: Option<u16>,

    /// Require memcached's ASCII authentication: a file of `user:password` lines (memcached's
    /// -Y). Each connection must first send `set <any key> 0 0 <len>` with `<user>
    /// <password>` as the data; everything else before that is refused. Cannot be combined
    /// with UDP (a datagram cannot authenticate) [default: off, a trusted network].
    #[arg(short = 'Y', long = "auth-file", env = "MEMFLEET_AUTH_FILE")]
    pub auth_file: Option<PathBuf>,

    /// Require binary-protocol SASL, as memcached's -S: clients log in with PLAIN against
    /// the password database (--sasl-pwdb); until then only SASL and version requests are
    /// served, and text-protocol connections are closed (memcached serves only the binary
    /// protocol with -S). Cannot be combined with --auth-file or UDP [default: off].
    #[arg(short = 'S', long = "enable-sasl", env = "MEMFLEET_ENABLE_SASL")]
    pub enable_sasl: bool,

    /// The SASL password database: `user:password` lines, memcached's
    /// `MEMCACHED_SASL_PWDB` format (the password ends at the next colon). Read again when it
    /// changes. Needed by --enable-sasl.
    #[arg(long = "sasl-pwdb", env = "MEMCACHED_SASL_PWDB")]
    pub sasl_pwdb: Option<PathBuf>,

    /// Answer AWS ElastiCache's auto discovery (`config get cluster`) with the nodes in
    /// FILE (`host|ip|port` entries), read again when it changes, its version the file's
    /// modification time: ElastiCache cluster clients poll every node for it [default: off,
    /// `config` is `ERROR` as in memcached].
    #[arg(long = "cluster-config", env = "MEMFLEET_CLUSTER_CONFIG")]
    pub cluster_config: Option<PathBuf>,

    /// Serve TLS on the TCP port with this certificate chain (PEM, leaf first; memcached's
    /// `-o ssl_chain_cert`). Needs --tls-key. SIGHUP reloads the certificate, key and CA
    /// files without a restart. UDP, when on, stays plain [default: off].
    #[arg(long = "tls-cert", env = "MEMFLEET_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,

    /// The TLS certificate's private key, PEM (memcached's `-o ssl_key`).
    #[arg(long = "tls-key", env = "MEMFLEET_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,

    /// CA certificates (PEM) client certificates are checked against (memcached's `-o
    /// ssl_ca_cert`): a client presenting a certificate must present a valid one.
    #[arg(long = "tls-ca", env = "MEMFLEET_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,

    /// Refuse TLS clients without a valid certificate signed by --tls-ca (memcached's `-o
    /// ssl_verify_mode=2`).
    #[arg(long = "tls-verify-client", env = "MEMFLEET_TLS_VERIFY_CLIENT")]
    pub tls_verify_client: bool,

    /// memcached's -Z: require TLS (the certificate and key must be given, with --tls-cert
    /// and --tls-key or memcached's `-o ssl_chain_cert=...,ssl_key=...`).
    #[arg(short = 'Z', long = "enable-ssl")]
    pub enable_ssl: bool,

    /// memcached's extended options, comma-separated: its TLS ones (`ssl_chain_cert=FILE`,
    /// `ssl_key=FILE`, `ssl_ca_cert=FILE`, `ssl_verify_mode=0..3`) and extstore's
    /// (`ext_path=PATH:SIZE` as --flash, `ext_threads=N` as --flash-threads; its other
    /// `ext_*` tunings are accepted and have no effect here).
    #[arg(short = 'o', value_name = "OPTIONS")]
    #[serde(skip)]
    pub extended: Vec<String>,

    /// Refuse `flush_all` (memcached's -F): `CLIENT_ERROR flush_all not allowed`, so that no
    /// client can empty the cache.
    #[arg(
        short = 'F',
        long = "disable-flush-all",
        env = "MEMFLEET_DISABLE_FLUSH_ALL"
    )]
    pub disable_flush_all: bool,

    /// For tests only: accept `debugtime <secs>|p|r`, the command of memcached's debug build
    /// that moves the server's clock forward (memcached's own t/expirations.t uses it).
    /// Anyone connected can then make every item expire [default: off, `debugtime` is
    /// `ERROR`].
    #[arg(long = "debug-time", env = "MEMFLEET_DEBUG_TIME")]
    pub debug_time: bool,

    /// For tests only: the CAS counter starts here, not at 0, so clients' handling of CAS
    /// uniques above 2^31 or 2^32 can be checked without billions of writes (at most 2^62).
    #[arg(long = "test-cas-start", hide = true, value_parser = clap::value_parser!(u64).range(..=1u64 << 62))]
    pub test_cas_start: Option<u64>,

    /// Listen backlog (memcached's -b) [default: 1024].
    #[arg(short = 'b', long = "listen-backlog", env = "MEMFLEET_LISTEN_BACKLOG")]
    #[serde(rename = "listen_backlog")]
    pub backlog: Option<u32>,

    /// A flash tier (memcached's `-o ext_path=PATH:SIZE`): items eviction would drop go to
    /// this file, in whole segments written with O_DIRECT, and cost RAM only their 8-byte
    /// hash slot. SIZE takes k/m/g/t suffixes; repeat for several files [default: none].
    #[arg(long = "flash", value_name = "PATH:SIZE")]
    pub flash: Vec<String>,

    /// Threads reading flash (memcached's `-o ext_threads`) [default: 4].
    #[arg(long = "flash-threads", env = "MEMFLEET_FLASH_THREADS")]
    pub flash_threads: Option<usize>,

    /// The average item size flash is sized for (k/m suffixes): the hash table, which is
    /// flash's index, gets one 8-byte slot per flash-size / this items. Smaller items fill
    /// flash past that and displace each other (`flash_index_drops`) [default: 512].
    #[arg(long = "flash-item-size", env = "MEMFLEET_FLASH_ITEM_SIZE")]
    #[serde(deserialize_with = "size_text")]
    pub flash_item_size: Option<String>,

    /// Most bytes per second written to flash (k/m/g suffixes), to keep within a drive's
    /// writes per day; what is over it is evicted as without flash [default: no limit].
    #[arg(long = "flash-write-budget", env = "MEMFLEET_FLASH_WRITE_BUDGET")]
    #[serde(deserialize_with = "size_text")]
    pub flash_write_budget: Option<String>,

    /// How workers read flash: `uring` (an io_uring per worker, submitted and completed on
    /// the worker's own thread; the reader threads if the kernel refuses io_uring) or
    /// `threads` (the reader threads, `--flash-threads`) [default: uring].
    #[arg(long = "flash-io", env = "MEMFLEET_FLASH_IO", value_parser = ["uring", "threads"])]
    pub flash_io: Option<String>,

    /// For tests only: milliseconds slept before every flash read and write (a slow
    /// device).
    #[arg(long = "flash-test-delay-ms", hide = true)]
    pub flash_test_delay_ms: Option<u64>,

    /// Read a TOML file of settings (keys as the long flags, `_` for `-`); flags and
    /// environment variables override it.
    #[arg(long, env = "MEMFLEET_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
}

/// A size in the file: a string with memcached's suffixes (`"2m"`) or a number of bytes.
fn size_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Text(String),
        Bytes(u64),
    }
    Ok(Some(match Size::deserialize(d)? {
        Size::Text(text) => text,
        Size::Bytes(n) => n.to_string(),
    }))
}

impl ServerArgs {
    /// These flags over the `--config` file's settings (the file's where a flag is not
    /// given: an option left out, a switch left off, a list left empty).
    fn over_file(&self) -> anyhow::Result<ServerArgs> {
        let Some(path) = &self.config else {
            return Ok(self.clone());
        };
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut table: toml::Table =
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        // `-o ext_path=` is a flash file given on the command line: the file's stand aside.
        let ext_paths = self.extended.iter().flat_map(|o| o.split(','));
        if ext_paths.clone().any(|o| o.trim().starts_with("ext_path=")) {
            table.remove("flash");
        }
        let given = toml::Table::try_from(self).context("the flags as settings")?;
        for (name, value) in given {
            let left_off = matches!(&value, toml::Value::Boolean(false))
                || matches!(&value, toml::Value::Array(a) if a.is_empty());
            if !left_off {
                table.insert(name, value);
            }
        }
        let mut merged: ServerArgs = table
            .try_into()
            .with_context(|| format!("parsing {}", path.display()))?;
        merged.extended = self.extended.clone();
        merged.config = self.config.clone();
        Ok(merged)
    }
}

/// Resolved settings, grouped by concern: how clients reach the server, what it may use,
/// and how leases behave.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// Sockets and who may use them.
    pub listen: Listen,
    /// Memory, connections, threads and item size.
    pub limits: Limits,
    /// Lease tokens and stale values.
    pub leases: Leases,
    /// The memory file for warm restarts.
    pub memory_file: Option<PathBuf>,
    /// `flush_all` refused (memcached's -F).
    pub flush_disabled: bool,
    /// `debugtime` moves the clock (tests only; `debug_clock.rs`).
    pub debug_time: bool,
    /// Where the CAS counter starts (tests only: `--test-cas-start`; 0 as memcached).
    pub cas_start: u64,
    /// The flash tier.
    pub flash: Flash,
}

/// The flash tier's files and settings (`--flash`, memcached's `-o ext_path`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Flash {
    /// Files and their sizes; empty: no flash tier.
    pub files: Vec<memfleet_flash::FlashSpec>,
    /// Reader threads.
    pub threads: usize,
    /// Bytes per second that may be written (`None`: no limit).
    pub write_budget: Option<u64>,
    /// The average item size the index is sized for.
    pub item_size: usize,
    /// Slept before every flash read and write (tests: a slow device).
    pub test_delay: Option<Duration>,
    /// How workers read flash.
    pub io: FlashIo,
}

/// How workers read flash (`--flash-io`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FlashIo {
    /// An io_uring per worker, falling back to the reader threads where the kernel refuses.
    #[default]
    Uring,
    /// The reader threads.
    Threads,
}

/// Where clients connect and what they must present: the TCP, UDP and metrics ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listen {
    /// Address to listen on (every port shares it).
    pub address: IpAddr,
    /// TCP port (0: let the kernel choose; all workers then share the first one chosen).
    pub port: u16,
    /// TCP listen backlog.
    pub backlog: u32,
    /// UDP port for reads (`None`: off; `Some(0)`: any free port, for tests).
    pub udp_port: Option<u16>,
    /// Every command over UDP, not just reads (`--udp-writes`).
    pub udp_writes: bool,
    /// Metrics port.
    pub admin_port: Option<u16>,
    /// memcached's ASCII authentication file (`user:password` lines); `None`: no auth.
    pub auth_file: Option<PathBuf>,
    /// Binary SASL's password database, when SASL is on (`-S`); `None`: no SASL.
    pub sasl_pwdb: Option<PathBuf>,
    /// The nodes `config get cluster` answers (`--cluster-config`); `None`: `ERROR`.
    pub cluster_config: Option<PathBuf>,
    /// TLS on the TCP port; `None`: plain TCP.
    pub tls: Option<ServerTlsFiles>,
}

/// What the server may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of item memory.
    pub memory_bytes: usize,
    /// Connection limit.
    pub max_connections: usize,
    /// Worker threads.
    pub threads: usize,
    /// Largest item, memcached's -I.
    pub max_item_size: usize,
    /// Idle connection timeout; `None` for never.
    pub idle_timeout: Option<Duration>,
}

/// Lease behaviour (`lease-get`, meta `N`/`R`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leases {
    /// Lease interval, seconds (at least 1).
    pub interval: u32,
    /// Seconds deleted values stay readable as stale (0: none).
    pub stale_after_delete: u32,
}

impl Default for Listen {
    fn default() -> Self {
        Listen {
            address: IpAddr::from([127, 0, 0, 1]),
            port: 11211,
            backlog: 1024,
            udp_port: None,
            udp_writes: false,
            admin_port: None,
            auth_file: None,
            sasl_pwdb: None,
            cluster_config: None,
            tls: None,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 64 << 20,
            max_connections: 1024,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            max_item_size: 1 << 20,
            idle_timeout: None,
        }
    }
}

impl Default for Leases {
    fn default() -> Self {
        Leases {
            interval: 10,
            stale_after_delete: 10,
        }
    }
}

impl Settings {
    /// A server with one worker and `memory_bytes` of items on 127.0.0.1:`port` (0: a port
    /// the kernel picks, read back with `Server::local_addr`), everything else the defaults:
    /// the usual shape of a server embedded in a test or a tool.
    pub fn single_worker(port: u16, memory_bytes: usize) -> Settings {
        let mut s = Settings::default();
        s.listen.port = port;
        s.limits.threads = 1;
        s.limits.memory_bytes = memory_bytes;
        s
    }

    /// Resolves flags (already merged with the environment by clap) over the config file
    /// over the defaults, and checks the result.
    pub fn resolve(args: &ServerArgs) -> anyhow::Result<Settings> {
        let args = &args.over_file()?;
        let tls = resolve_tls(args)?;
        let flash = resolve_flash(args)?;
        let mut s = Settings::default();
        if let Some(v) = args.listen {
            s.listen.address = v;
        }
        if let Some(v) = args.port {
            s.listen.port = v;
        }
        if let Some(mib) = args.memory_limit {
            if mib == 0 {
                bail!("--memory-limit must be at least 1 MiB");
            }
            s.limits.memory_bytes = mib
                .checked_mul(1 << 20)
                .context("--memory-limit too large")?;
        }
        if let Some(v) = args.max_connections {
            if v == 0 {
                bail!("--max-connections must be at least 1");
            }
            s.limits.max_connections = v;
        }
        if let Some(v) = args.threads {
            if v == 0 || v > 1024 {
                bail!("--threads must be between 1 and 1024, got {v}");
            }
            s.limits.threads = v;
        }
        let item_size = args.max_item_size.as_deref().map(parse_size).transpose()?;
        if let Some(v) = item_size {
            if !(1024..=1 << 30).contains(&v) {
                bail!("--max-item-size must be between 1k and 1024m, got {v} bytes");
            }
            s.limits.max_item_size = v;
        }
        if let Some(secs) = args.idle_timeout {
            s.limits.idle_timeout = (secs > 0).then(|| Duration::from_secs(secs));
        }
        s.memory_file = args.memory_file.clone();
        // memcached's -U 0 means off; tests ask for a free port by setting Some(0) directly.
        s.listen.udp_port = args.udp_port.filter(|p| *p != 0);
        s.listen.udp_writes = args.udp_writes;
        if s.listen.udp_writes && s.listen.udp_port.is_none() {
            bail!("--udp-writes needs --udp-port: it opens writes on the UDP listener");
        }
        if let Some(v) = args.lease_interval {
            if v == 0 {
                bail!("--lease-interval must be at least 1 second");
            }
            s.leases.interval = v;
        }
        if let Some(v) = args.stale_after_delete {
            s.leases.stale_after_delete = v;
        }
        s.listen.admin_port = args.admin_port;
        if let Some(v) = args.backlog {
            s.listen.backlog = v;
        }
        s.listen.auth_file = args.auth_file.clone();
        if s.listen.auth_file.is_some() && s.listen.udp_port.is_some() {
            bail!(
                "--auth-file and --udp-port cannot be combined: a UDP request cannot authenticate"
            );
        }
        if args.enable_sasl {
            let Some(pwdb) = args.sasl_pwdb.clone() else {
                bail!(
                    "--enable-sasl needs a password database: --sasl-pwdb FILE or \
                     MEMCACHED_SASL_PWDB (user:password lines)"
                );
            };
            if s.listen.auth_file.is_some() {
                bail!(
                    "--enable-sasl and --auth-file cannot be combined: SASL serves the binary \
                     protocol only, ASCII authentication the text protocol"
                );
            }
            if s.listen.udp_port.is_some() {
                // memcached's words.
                bail!("Cannot enable UDP while using binary SASL authentication.");
            }
            s.listen.sasl_pwdb = Some(pwdb);
        }
        s.listen.cluster_config = args.cluster_config.clone();
        s.listen.tls = tls;
        s.flash = flash;
        if !s.flash.files.is_empty() && s.listen.udp_port.is_some() {
            // As memcached's extstore: a flash read cannot be answered within a datagram's turn.
            bail!(
                "--flash and --udp-port cannot be combined (memcached's extstore refuses UDP too)"
            );
        }
        s.flush_disabled = args.disable_flush_all;
        s.debug_time = args.debug_time;
        s.cas_start = args.test_cas_start.unwrap_or(0);
        if s.debug_time && s.memory_file.is_some() {
            bail!(
                "--debug-time and --memory-file cannot be combined: a moved clock would be saved"
            );
        }
        if s.limits.memory_bytes < 8 * s.segment_size() {
            bail!(
                "--memory-limit must hold at least 8 segments of {} MiB (the item size \
                 limit rounded up): at least {} MiB",
                s.segment_size() >> 20,
                (8 * s.segment_size()) >> 20
            );
        }
        Ok(s)
    }

    /// The engine's segment size: 1 MiB, or the item size limit rounded up to a power of two
    /// when items may be larger (an item never spans segments).
    pub fn segment_size(&self) -> usize {
        self.limits.max_item_size.next_power_of_two().max(1 << 20)
    }
}

/// Parses memcached's `-I` syntax: a byte count with an optional `k`/`m` suffix (any case).
pub fn parse_size(text: &str) -> anyhow::Result<usize> {
    let t = text.trim();
    let (digits, unit) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1 << 10),
        Some((i, 'm' | 'M')) => (&t[..i], 1 << 20),
        _ => (t, 1),
    };
    let n: usize = digits
        .parse()
        .with_context(|| format!("not a size: {text:?} (bytes, or a number with k or m)"))?;
    n.checked_mul(unit)
        .with_context(|| format!("size too large: {text}"))
}

mod memcached_options;

use memcached_options::{resolve_flash, resolve_tls};

#[cfg(test)]
mod tests;

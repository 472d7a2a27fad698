//! [`RouterArgs`]: the `memfleet router` flags.

use std::path::PathBuf;

/// `memfleet router` flags.
#[derive(clap::Args, Clone, Debug)]
pub struct RouterArgs {
    /// memfleet's TOML pool file (see `memfleet_routing::config`).
    #[arg(long, conflicts_with = "twemproxy")]
    pub config: Option<PathBuf>,
    /// A twemproxy (nutcracker) YAML file, read as twemproxy reads it: same listeners,
    /// same key placement.
    #[arg(long)]
    pub twemproxy: Option<PathBuf>,
    /// Worker threads [default: one per core]. `-t` with no number is nutcracker's `-t`
    /// (`--test-conf`): check the configuration the other flags give and exit.
    #[arg(
        short = 't',
        long,
        value_name = "N",
        num_args = 0..=1,
        default_missing_value = "test",
        value_parser = parse_threads
    )]
    pub threads: Option<Threads>,
    /// Check the configuration given with --config or --twemproxy and exit, binding
    /// nothing (nutcracker's `-t`, `--test-conf`): 0 and a line saying what it holds when it
    /// is fine, else every problem found and 1.
    #[arg(long = "test-conf")]
    pub test_conf: bool,
    /// Check FILE (memfleet's TOML; twemproxy's YAML when it ends in .yml or .yaml) and exit,
    /// binding nothing (mcrouter's --validate-config): 0 and a line saying what it holds
    /// when it is fine, else every problem found and 1.
    #[arg(long = "validate-config", value_name = "FILE", conflicts_with_all = ["config", "twemproxy"])]
    pub validate_config: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9151); off unless
    /// given.
    #[arg(long = "admin-listen", value_name = "ADDR")]
    pub admin_listen: Option<String>,
    /// Serve TLS on every TCP listener with this certificate chain (PEM, leaf first); needs
    /// --tls-key. SIGHUP, or a change to the files, reloads them without a restart. Unix
    /// socket listeners stay plain [default: off].
    #[arg(long = "tls-cert", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The TLS certificate's private key, PEM.
    #[arg(long = "tls-key", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// CA certificates (PEM) client certificates are checked against: a client presenting
    /// a certificate must present a valid one.
    #[arg(long = "tls-ca", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Refuse TLS clients without a valid certificate signed by --tls-ca.
    #[arg(long = "tls-verify-client")]
    pub tls_verify_client: bool,
    /// Require memcached's ASCII authentication from clients, as `memfleet server -Y` and
    /// memcached's `-Y` do: a file of `user:password` lines; until a connection sends `set
    /// <any key> 0 0 <len>` whose data is `<user> <password>`, every command gets
    /// `CLIENT_ERROR unauthenticated`. Reloaded on SIGHUP and when it changes. Servers'
    /// own authentication is a pool setting (`auth_user`) [default: off].
    #[arg(short = 'Y', long = "auth-file", value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
    /// Log this fraction (0 to 1) of client requests as JSON lines: op, route or pool,
    /// destination server, latency in µs, result, and the key's xxh3 (the key itself with
    /// --log-keys), to stderr or --request-log [default: off].
    #[arg(long = "log-requests", value_name = "RATE")]
    pub log_requests: Option<f64>,
    /// Log keys as they are instead of their hash (with --log-requests).
    #[arg(long = "log-keys", requires = "log_requests")]
    pub log_keys: bool,
    /// Append the request log to FILE instead of stderr (with --log-requests).
    #[arg(long = "request-log", value_name = "FILE", requires = "log_requests")]
    pub request_log: Option<PathBuf>,
}

/// `-t`'s value: a thread count, or none (nutcracker's `-t`: test the configuration).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threads {
    /// `-t N`, `--threads N`.
    Count(usize),
    /// A bare `-t`.
    TestConfig,
}

fn parse_threads(value: &str) -> Result<Threads, String> {
    match value {
        "test" => Ok(Threads::TestConfig),
        n => match n.parse::<usize>() {
            Ok(n) if n > 0 => Ok(Threads::Count(n)),
            _ => Err(format!("{n:?} is not a thread count (1 or more)")),
        },
    }
}

impl RouterArgs {
    /// Whether the command only checks its configuration (`-t`, `--test-conf`,
    /// `--validate-config`).
    pub fn checks_only(&self) -> bool {
        self.test_conf
            || self.validate_config.is_some()
            || self.threads == Some(Threads::TestConfig)
    }

    /// The worker threads asked for, if any.
    pub fn thread_count(&self) -> Option<usize> {
        match self.threads {
            Some(Threads::Count(n)) => Some(n),
            _ => None,
        }
    }

    /// The listeners' TLS settings, when TLS is on.
    pub fn tls_files(&self) -> anyhow::Result<Option<memfleet_tls::ServerTlsFiles>> {
        memfleet_tls::ServerTlsFiles::from_options(
            self.tls_cert.clone(),
            self.tls_key.clone(),
            self.tls_ca.clone(),
            self.tls_verify_client,
        )
    }
}

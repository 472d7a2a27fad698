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
    /// Worker threads [default: one per core].
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
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
}

impl RouterArgs {
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

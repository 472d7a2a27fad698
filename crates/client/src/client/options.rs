//! [`ClientOptions`]: compression, the flow-control window, look-aside pacing, UDP, remote
//! markers.

use std::time::Duration;

/// Client settings.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Compress values at least this long (lz4); `None`: never.
    pub compress_above: Option<usize>,
    /// Flow-control window: initial, minimum and maximum outstanding requests.
    pub window: (usize, usize, usize),
    /// Look-aside: first pause after a hot miss (doubles up to `lease_retry_max`).
    pub lease_retry: Duration,
    /// Look-aside: longest pause between retries.
    pub lease_retry_max: Duration,
    /// Look-aside: how long to wait for another caller's fill before loading anyway
    /// (without filling).
    pub lease_wait: Duration,
    /// Look-aside: take a stale value rather than wait.
    pub accept_stale: bool,
    /// Send gets over UDP, to the same port number as the server's TCP port (memcached's
    /// `-U` equal to `-p`), waiting at most this long for a whole reply; `None`: TCP only.
    pub udp: Option<Duration>,
    /// Remote markers (paper §5) are stored under this prefix followed by the key; route
    /// the prefix to the regional pool that every cluster of the region shares.
    pub marker_prefix: String,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            compress_above: Some(16 * 1024),
            window: (64, 2, 10_000),
            lease_retry: Duration::from_millis(2),
            lease_retry_max: Duration::from_millis(100),
            lease_wait: Duration::from_secs(2),
            accept_stale: false,
            udp: None,
            marker_prefix: "remote-marker:".into(),
        }
    }
}

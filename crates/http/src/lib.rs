//! Just enough HTTP/1.1 for an admin port that serves a page or two (`/metrics` for
//! Prometheus): find the request line of a request read so far, and write a response. The
//! server's admin port and the client library's metrics server (router, invalidator) share
//! one accept loop around these, `serve` (`serve.rs`), behind the `serve` feature: the only
//! I/O, and the only dependency (tokio). Not memcached's protocol, so not in
//! `memfleet-protocol`.
//!
//! Deliberately tiny (one request per connection, no keep-alive, no bodies): scrapers need
//! nothing more, and a full HTTP stack would be the largest dependency for one page.

#[cfg(feature = "serve")]
mod serve;
#[cfg(feature = "serve")]
pub use serve::serve;

/// The largest request head accepted.
pub const MAX_REQUEST: usize = 8 * 1024;

/// What the bytes of a request read so far amount to.
#[derive(Debug, PartialEq, Eq)]
pub enum Head<'a> {
    /// The head is not complete yet.
    Incomplete,
    /// The request line's method and target.
    Request {
        /// `GET`, ...
        method: &'a [u8],
        /// `/metrics`, possibly with a query.
        target: &'a [u8],
    },
    /// Too long or not HTTP: close without answering.
    Refused,
}

/// Reads the request line once the whole head (up to the blank line) has arrived.
pub fn head(buf: &[u8]) -> Head<'_> {
    if !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        return if buf.len() > MAX_REQUEST {
            Head::Refused
        } else {
            Head::Incomplete
        };
    }
    let line = buf.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut parts = line.trim_ascii_end().split(|&b| b == b' ');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(method), Some(target), Some(version)) if version.starts_with(b"HTTP/") => {
            Head::Request { method, target }
        }
        _ => Head::Refused,
    }
}

/// A complete response with a plain-text body (Prometheus' text format is plain text).
pub fn response(status: &str, body: &str) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// The usual answers of a one-page admin port: the page for `GET page`, 404 for another
/// path, 405 for another method.
pub fn answer(
    method: &[u8],
    target: &[u8],
    page: &str,
    render: impl FnOnce() -> String,
) -> Vec<u8> {
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    match method {
        b"GET" if path == page.as_bytes() => response("200 OK", &render()),
        b"GET" => response("404 Not Found", &format!("not found; try {page}\n")),
        _ => response("405 Method Not Allowed", "only GET\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_heads() {
        assert_eq!(
            head(b"GET /metrics HTTP/1.1\r\nHost: x\r\n"),
            Head::Incomplete
        );
        assert_eq!(
            head(b"GET /metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n"),
            Head::Request {
                method: b"GET",
                target: b"/metrics?x=1"
            }
        );
        assert_eq!(head(b"hello\r\n\r\n"), Head::Refused);
        assert_eq!(head(&[b'a'; MAX_REQUEST + 1]), Head::Refused);
        let ok = answer(b"GET", b"/metrics", "/metrics", || "a 1\n".into());
        assert!(ok.starts_with(b"HTTP/1.1 200 OK\r\n") && ok.ends_with(b"\r\n\r\na 1\n"));
        assert!(answer(b"GET", b"/", "/metrics", String::new).starts_with(b"HTTP/1.1 404"));
        assert!(answer(b"POST", b"/metrics", "/metrics", String::new).starts_with(b"HTTP/1.1 405"));
    }
}

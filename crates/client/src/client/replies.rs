//! Reading a server's replies for a [`Client`](super::Client): one-key retrievals (values,
//! leases, misses), storage verdicts, and the key check every command makes first.

use super::values::{Error, Value, FLAG_COMPRESSED};
use memfleet_protocol::reply::{self, ReplyKind, ServerReply};

/// A key memcached can take: 1 to 250 bytes, no spaces or control characters.
pub(super) fn check_key(key: &[u8]) -> Result<(), Error> {
    if key.is_empty() || key.len() > 250 || key.iter().any(|&b| b <= b' ' || b == 0x7f) {
        return Err(Error::InvalidKey);
    }
    Ok(())
}

/// `line` if it is `want`, else a protocol error.
pub(super) fn expect(line: &str, want: &str) -> Result<(), Error> {
    if line == want {
        Ok(())
    } else {
        Err(Error::Protocol(line.to_string()))
    }
}

/// A storage reply: stored or not (an error line is an error).
pub(super) fn stored(line: &str) -> Result<bool, Error> {
    match line {
        "STORED" => Ok(true),
        "NOT_STORED" | "EXISTS" | "NOT_FOUND" => Ok(false),
        _ => Err(Error::Protocol(line.to_string())),
    }
}

/// A value as it came off the wire (maybe compressed).
pub(super) struct WireValue {
    pub(super) data: Vec<u8>,
    flags: u32,
    cas: Option<u64>,
}

/// A one-key retrieval reply, read.
pub(super) enum Retrieved {
    Value(WireValue),
    Miss,
    Lease {
        token: u64,
        stale: Option<WireValue>,
    },
}

/// Reads a one-key retrieval reply (`VALUE key flags bytes [cas]`, `LVALUE key token flags
/// bytes`, or `END`) with the protocol's decoder.
pub(super) fn parse_retrieval(reply: &[u8]) -> Result<Retrieved, Error> {
    let bad = || Error::Protocol(String::from_utf8_lossy(reply).into_owned());
    let values = match reply::decode(reply, ReplyKind::Retrieval).map_err(|_| bad())? {
        ServerReply::Values(values) => values,
        ServerReply::Error(..) => {
            let line = reply.split(|&b| b == b'\r').next().unwrap_or(reply);
            return Err(Error::Server(String::from_utf8_lossy(line).into_owned()));
        }
        _ => return Err(bad()),
    };
    let Some(v) = values.first() else {
        return Ok(Retrieved::Miss);
    };
    let wire = WireValue {
        data: v.data.to_vec(),
        flags: v.flags,
        cas: v.cas,
    };
    Ok(match v.lease {
        None => Retrieved::Value(wire),
        Some(token) => Retrieved::Lease {
            token,
            stale: Some(wire),
        },
    })
}

/// The value as stored, decompressed if this client compressed it.
pub(super) fn decode(w: WireValue) -> Result<Value, Error> {
    let data = if w.flags & FLAG_COMPRESSED != 0 {
        lz4_flex::decompress_size_prepended(&w.data).map_err(|e| Error::Corrupt(e.to_string()))?
    } else {
        w.data
    };
    Ok(Value {
        data,
        flags: w.flags & !FLAG_COMPRESSED,
        cas: w.cas,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retrieval_replies_parse() {
        match parse_retrieval(b"VALUE k 5 3 77\r\nabc\r\nEND\r\n").unwrap() {
            Retrieved::Value(w) => {
                assert_eq!(
                    (w.data.as_slice(), w.flags, w.cas),
                    (&b"abc"[..], 5, Some(77))
                )
            }
            _ => panic!("not a value"),
        }
        assert!(matches!(
            parse_retrieval(b"END\r\n").unwrap(),
            Retrieved::Miss
        ));
        match parse_retrieval(b"LVALUE k 123 0 0\r\n\r\nEND\r\n").unwrap() {
            Retrieved::Lease { token, stale } => {
                assert_eq!(token, 123);
                assert!(stale.unwrap().data.is_empty());
            }
            _ => panic!("not a lease"),
        }
        assert!(matches!(
            parse_retrieval(b"SERVER_ERROR out of memory\r\n"),
            Err(Error::Server(_))
        ));
        assert!(matches!(
            parse_retrieval(b"VALUE k 0 10\r\nabc\r\n"),
            Err(Error::Protocol(_))
        ));
    }

    #[test]
    fn keys_are_checked() {
        assert!(check_key(b"ok:key").is_ok());
        for bad in [&b""[..], b"has space", b"tab\t", &[b'k'; 251]] {
            assert!(matches!(check_key(bad), Err(Error::InvalidKey)));
        }
    }
}

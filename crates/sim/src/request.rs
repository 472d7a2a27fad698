//! The [`Request`] every workload source produces (trace readers and the
//! synthetic generator) and the memcached [`TraceOp`]s it can carry. Plain data: no
//! parsing of files, no cache behaviour.

/// A memcached operation as recorded in a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceOp {
    /// `get`
    Get,
    /// `gets`
    Gets,
    /// `set`
    Set,
    /// `add`
    Add,
    /// `replace`
    Replace,
    /// `cas`
    Cas,
    /// `append`
    Append,
    /// `prepend`
    Prepend,
    /// `delete`
    Delete,
    /// `incr`
    Incr,
    /// `decr`
    Decr,
}

const OP_NAMES: [(TraceOp, &str); 11] = [
    (TraceOp::Get, "get"),
    (TraceOp::Gets, "gets"),
    (TraceOp::Set, "set"),
    (TraceOp::Add, "add"),
    (TraceOp::Replace, "replace"),
    (TraceOp::Cas, "cas"),
    (TraceOp::Append, "append"),
    (TraceOp::Prepend, "prepend"),
    (TraceOp::Delete, "delete"),
    (TraceOp::Incr, "incr"),
    (TraceOp::Decr, "decr"),
];

impl TraceOp {
    /// Parses an operation name (ASCII case-insensitive), e.g. `b"gets"`.
    pub fn parse(name: &[u8]) -> Option<TraceOp> {
        OP_NAMES
            .iter()
            .find(|(_, n)| n.as_bytes().eq_ignore_ascii_case(name))
            .map(|(op, _)| *op)
    }

    /// The lower-case memcached name of the operation.
    pub fn as_str(self) -> &'static str {
        OP_NAMES
            .iter()
            .find(|(op, _)| *op == self)
            .map_or("?", |(_, n)| n)
    }

    /// Maps libCacheSim's `req_op_e` code (1 = get … 11 = decr).
    pub fn from_libcachesim(code: u8) -> Option<TraceOp> {
        let index = usize::from(code).checked_sub(1)?;
        OP_NAMES.get(index).map(|(op, _)| *op)
    }

    /// libCacheSim's `req_op_e` code of the operation (the inverse of
    /// [`TraceOp::from_libcachesim`]).
    pub fn libcachesim_code(self) -> u8 {
        let index = OP_NAMES.iter().position(|(op, _)| *op == self);
        index.map_or(0, |i| i as u8 + 1)
    }
}

/// One cache request, from a trace or the synthetic generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Timestamp in seconds (trace time; replay makes it relative to the first request).
    pub time: u32,
    /// Compact key id; `replay` turns it into key bytes of `key_size`.
    pub key: u64,
    /// Key length in bytes as recorded.
    pub key_size: u32,
    /// Value length in bytes (for a get: the size to fill on a miss).
    pub value_size: u32,
    /// The operation.
    pub op: TraceOp,
    /// Time-to-live in seconds; 0 means none recorded / never expires.
    pub ttl: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_name_round_trips() {
        for (op, name) in OP_NAMES {
            assert_eq!(TraceOp::parse(name.as_bytes()), Some(op));
            assert_eq!(op.as_str(), name);
        }
        assert_eq!(TraceOp::from_libcachesim(1), Some(TraceOp::Get));
        assert_eq!(TraceOp::from_libcachesim(9), Some(TraceOp::Delete));
        assert_eq!(TraceOp::from_libcachesim(0), None);
        assert_eq!(TraceOp::from_libcachesim(12), None);
        for (op, _) in OP_NAMES {
            assert_eq!(TraceOp::from_libcachesim(op.libcachesim_code()), Some(op));
        }
    }
}

//! One key's request as routes see it ([`RouteRequest`]: its class, key and written form),
//! who sends it ([`RouteContext`]), and what comes back ([`RouteReply`]).

use crate::backend::BackendError;
use memfleet_protocol::reply::ReplyKind;
pub use memfleet_protocol::RequestClass;
use memfleet_protocol::{Request, Store, StoreCommand};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A server's reply, or why there is none.
pub type RouteReply = Result<Vec<u8>, BackendError>;
/// A reply on its way.
pub type ReplyFuture = Pin<Box<dyn Future<Output = RouteReply> + Send>>;

/// One key's request as routes see it: enough structure to change its key (prefix
/// stripping), its TTL (gutter) or its hold-off (warm-up), and to encode it.
#[derive(Clone, Debug)]
pub struct RouteRequest {
    /// What it does, for routes that treat kinds differently.
    pub class: RequestClass,
    /// The key routing uses (decoded, for a base64 meta key).
    pub key: Vec<u8>,
    /// How it is written.
    pub form: RequestForm,
}

/// How a [`RouteRequest`] is written.
#[derive(Clone, Debug)]
pub enum RequestForm {
    /// `<head> <key>\r\n`.
    Get {
        /// `get`, `gets`, `gat <exptime>`, `gats <exptime>` or `lease-get`.
        head: Vec<u8>,
    },
    /// A storage command (never `noreply`: the caller applies it).
    Store {
        /// set, add, replace, append, prepend, cas, lease-set.
        command: StoreCommand,
        /// Client flags.
        flags: u32,
        /// memcached's exptime.
        exptime: i64,
        /// CAS unique (cas) or lease token (lease-set); 0 otherwise.
        cas: u64,
        /// The value.
        data: Arc<[u8]>,
    },
    /// `delete <key> [holdoff]`.
    Delete {
        /// Hold-off seconds (0: a plain delete).
        holdoff: u32,
    },
    /// Any other request, written as `head`, the key, `tail`.
    Raw {
        /// Up to the key (`"mg "`).
        head: Vec<u8>,
        /// The key as written (base64 for a meta `b` key).
        wire_key: Vec<u8>,
        /// The rest of the line and any data block.
        tail: Vec<u8>,
        /// The shape of its reply.
        kind: ReplyKind,
    },
}

impl RouteRequest {
    /// A request written as `head`, the key, `tail` (`tail` ends the line, and carries any
    /// data block).
    pub fn raw(
        class: RequestClass,
        key: &[u8],
        head: &[u8],
        tail: Vec<u8>,
        kind: ReplyKind,
    ) -> RouteRequest {
        RouteRequest {
            class,
            key: key.to_vec(),
            form: RequestForm::Raw {
                head: head.to_vec(),
                wire_key: key.to_vec(),
                tail,
                kind,
            },
        }
    }

    /// The request's bytes.
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.key.len() + 32);
        match &self.form {
            RequestForm::Get { head } => {
                out.extend_from_slice(head);
                out.push(b' ');
                out.extend_from_slice(&self.key);
                out.extend_from_slice(b"\r\n");
            }
            RequestForm::Store {
                command,
                flags,
                exptime,
                cas,
                data,
            } => Request::Store(Store {
                command: *command,
                key: &self.key,
                flags: *flags,
                exptime: *exptime,
                cas: *cas,
                noreply: false,
                data,
            })
            .encode(&mut out),
            RequestForm::Delete { holdoff } => Request::Delete {
                key: &self.key,
                holdoff: *holdoff,
                noreply: false,
            }
            .encode(&mut out),
            RequestForm::Raw {
                head,
                wire_key,
                tail,
                ..
            } => {
                out.extend_from_slice(head);
                out.extend_from_slice(wire_key);
                out.extend_from_slice(tail);
            }
        }
        if !out.ends_with(b"\r\n") {
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    /// The shape of its reply.
    pub fn reply_kind(&self) -> ReplyKind {
        match &self.form {
            RequestForm::Get { .. } => ReplyKind::Retrieval,
            RequestForm::Store { .. } | RequestForm::Delete { .. } => ReplyKind::Line,
            RequestForm::Raw { kind, .. } => *kind,
        }
    }

    /// The same operation on another key (a stripped routing prefix).
    pub(super) fn with_key(&self, key: &[u8]) -> RouteRequest {
        let mut op = self.clone();
        if let RequestForm::Raw { wire_key, .. } = &mut op.form {
            *wire_key = if *wire_key == self.key {
                key.to_vec()
            } else {
                // A base64 meta key: the new key is written the same way.
                let mut w = Vec::new();
                memfleet_protocol::base64::encode_into(&mut w, key);
                w
            };
        }
        op.key = key.to_vec();
        op
    }

    /// The client flags and value length of the item a store (storage command, `lease-set`
    /// or meta set) would write; `None` for anything else.
    pub fn stored_item(&self) -> Option<(u32, usize)> {
        match &self.form {
            RequestForm::Store { flags, data, .. } => Some((*flags, data.len())),
            RequestForm::Raw { head, tail, .. } if head.as_slice() == b"ms " => {
                // ` <datalen> <flags>*\r\n<data>\r\n`, as the proxy split it.
                let line = tail.split(|&b| b == b'\r').next().unwrap_or_default();
                let mut tokens = line.split(|&b| b == b' ').filter(|t| !t.is_empty());
                let len = std::str::from_utf8(tokens.next()?).ok()?.parse().ok()?;
                let flags = tokens
                    .find_map(|t| t.strip_prefix(b"F"))
                    .and_then(|f| std::str::from_utf8(f).ok()?.parse().ok())
                    .unwrap_or(0);
                Some((flags, len))
            }
            _ => None,
        }
    }

    /// What a route answers when it does not wait for servers (`all-async`): nothing that
    /// claims a delete happened.
    pub(super) fn unconfirmed(&self) -> &'static [u8] {
        match (&self.form, self.class) {
            (RequestForm::Raw { .. }, RequestClass::Delete) => b"NF\r\n",
            (RequestForm::Raw { .. }, _) => b"HD\r\n",
            (_, RequestClass::Delete) => b"NOT_FOUND\r\n",
            (_, RequestClass::Get) => b"END\r\n",
            _ => b"STORED\r\n",
        }
    }
}

/// Where an operation comes from: the client's lane (its connection to each server) and
/// its identity for replica choice.
#[derive(Clone, Copy, Debug)]
pub struct RouteContext {
    /// Which of each server's connections the caller uses (the same one keeps its order).
    pub lane: usize,
    /// The caller's identity for choosing a replica (a hash of its address).
    pub client: u64,
}

#[cfg(test)]
impl RouteRequest {
    /// For the route types' unit tests: a meta request (a set's class) on key `k`, `head` its
    /// command and a space, `tail` what follows the key.
    pub(super) fn meta_on_k(head: &[u8], tail: &[u8]) -> RouteRequest {
        RouteRequest {
            class: RequestClass::Set,
            key: b"k".to_vec(),
            form: RequestForm::Raw {
                head: head.to_vec(),
                wire_key: b"k".to_vec(),
                tail: tail.to_vec(),
                kind: ReplyKind::Meta,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_encode_as_memcached_requests() {
        let store = RouteRequest {
            class: RequestClass::Set,
            key: b"k".to_vec(),
            form: RequestForm::Store {
                command: StoreCommand::Add,
                flags: 5,
                exptime: 10,
                cas: 0,
                data: Arc::from(&b"abc"[..]),
            },
        };
        assert_eq!(store.bytes(), b"add k 5 10 3\r\nabc\r\n");
        let del = RouteRequest {
            class: RequestClass::Delete,
            key: b"/r/c/k".to_vec(),
            form: RequestForm::Delete { holdoff: 2 },
        };
        assert_eq!(del.with_key(b"k").bytes(), b"delete k 2\r\n");
        let mg = RouteRequest {
            class: RequestClass::Get,
            key: b"k".to_vec(),
            form: RequestForm::Raw {
                head: b"mg ".to_vec(),
                wire_key: b"k".to_vec(),
                tail: b" v\r\n".to_vec(),
                kind: ReplyKind::Meta,
            },
        };
        assert_eq!(mg.with_key(b"x").bytes(), b"mg x v\r\n");
        assert_eq!(store.stored_item(), Some((5, 3)));
        assert_eq!(mg.stored_item(), None);
        let ms = |tail: &[u8]| RouteRequest {
            class: RequestClass::Set,
            key: b"k".to_vec(),
            form: RequestForm::Raw {
                head: b"ms ".to_vec(),
                wire_key: b"k".to_vec(),
                tail: tail.to_vec(),
                kind: ReplyKind::Meta,
            },
        };
        assert_eq!(ms(b" 3 T0 F7\r\nabc\r\n").stored_item(), Some((7, 3)));
        assert_eq!(ms(b" 2\r\nab\r\n").stored_item(), Some((0, 2)));
    }
}

//! What every part that handles a request needs to know of it, said once per command: the
//! class of operation it is, its keys, and who answers it. The server, the router and the
//! client library read requests through these; each match here is exhaustive, so a new
//! [`Request`] variant does not compile until it is described.

use crate::request::{MetaKey, Request};
use crate::tokens::Tokens;

/// What an operation on a key does, for routes, rate limits and counters that treat kinds
/// differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RequestClass {
    /// get, gets, gat, gats, lease-get, mg.
    Get,
    /// Storage, lease-set, arithmetic, touch, ms, ma.
    Set,
    /// delete, md.
    Delete,
    /// Anything else with a key (me).
    Other,
}

/// Who answers a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answerer {
    /// The server its key maps to (each key's, for a multi-key get).
    KeyServer(RequestClass),
    /// Whoever received it, alone: `version`, `verbosity`, `mn`, `quit`.
    Receiver,
    /// Every server: `stats`, `flush_all` (a router asks them all or answers for them).
    EveryServer,
    /// An administrative command this crate does not model ([`Request::Other`]): `ERROR`
    /// unless the receiver knows it.
    Unmodelled,
}

impl<'a> Request<'a> {
    /// Who answers it, and for a keyed request its class.
    #[inline]
    pub fn answerer(&self) -> Answerer {
        match self {
            Request::Get(_) | Request::MetaGet(_) => Answerer::KeyServer(RequestClass::Get),
            Request::Store(_)
            | Request::Arith { .. }
            | Request::Touch { .. }
            | Request::MetaSet(_)
            | Request::MetaArithmetic(_) => Answerer::KeyServer(RequestClass::Set),
            Request::Delete { .. } | Request::MetaDelete(_) => {
                Answerer::KeyServer(RequestClass::Delete)
            }
            Request::MetaDebug { .. } => Answerer::KeyServer(RequestClass::Other),
            Request::Version | Request::Verbosity { .. } | Request::Quit | Request::MetaNoop => {
                Answerer::Receiver
            }
            Request::Stats { .. } | Request::FlushAll { .. } => Answerer::EveryServer,
            Request::Other { .. } => Answerer::Unmodelled,
        }
    }

    /// Its class, when it is an operation on keys.
    #[inline]
    pub fn class(&self) -> Option<RequestClass> {
        match self.answerer() {
            Answerer::KeyServer(class) => Some(class),
            _ => None,
        }
    }

    /// Whether the client asked for no reply (text `noreply`; meta `q` is not this: it
    /// drops only some replies).
    #[inline]
    pub fn noreply(&self) -> bool {
        match self {
            Request::Store(s) => s.noreply,
            Request::Delete { noreply, .. }
            | Request::Arith { noreply, .. }
            | Request::Touch { noreply, .. }
            | Request::FlushAll { noreply, .. }
            | Request::Verbosity { noreply, .. } => *noreply,
            Request::Get(_)
            | Request::MetaGet(_)
            | Request::MetaSet(_)
            | Request::MetaDelete(_)
            | Request::MetaArithmetic(_)
            | Request::MetaDebug { .. }
            | Request::Version
            | Request::Stats { .. }
            | Request::Quit
            | Request::MetaNoop
            | Request::Other { .. } => false,
        }
    }

    /// Its keys in order, as sent (a base64 meta key's [`MetaKey::bytes`] decodes it, on
    /// the stack), none for a request without. Small items: a key is two words and a flag,
    /// so a loop over them costs what a hand-written match does.
    #[inline]
    pub fn keys(&self) -> Keys<'a> {
        let one = |key: &'a [u8]| Keys::One(Some(MetaKey::new(key, false)));
        match self {
            Request::Get(g) => Keys::Many(g.keys),
            Request::Store(s) => one(s.key),
            Request::Delete { key, .. }
            | Request::Arith { key, .. }
            | Request::Touch { key, .. } => one(key),
            Request::MetaGet(m) | Request::MetaDelete(m) => Keys::One(Some(m.key)),
            Request::MetaSet(m) => Keys::One(Some(m.key)),
            Request::MetaArithmetic(m) => Keys::One(Some(m.key)),
            Request::MetaDebug { key } => Keys::One(Some(*key)),
            Request::Version
            | Request::Verbosity { .. }
            | Request::Stats { .. }
            | Request::FlushAll { .. }
            | Request::Quit
            | Request::MetaNoop
            | Request::Other { .. } => Keys::One(None),
        }
    }
}

/// A request's keys ([`Request::keys`]).
#[derive(Clone, Debug)]
pub enum Keys<'a> {
    /// A multi-key get's.
    Many(Tokens<'a>),
    /// One key, or none.
    One(Option<MetaKey<'a>>),
}

impl<'a> Iterator for Keys<'a> {
    type Item = MetaKey<'a>;

    #[inline]
    fn next(&mut self) -> Option<MetaKey<'a>> {
        match self {
            Keys::Many(tokens) => tokens.next().map(|k| MetaKey::new(k, false)),
            Keys::One(key) => key.take(),
        }
    }

    // Internal iteration goes straight to the tokens' own (as fast as a hand-written
    // match over the request: `for_each` on a request's keys costs what it did before).
    #[inline]
    fn fold<B, F: FnMut(B, MetaKey<'a>) -> B>(self, init: B, mut f: F) -> B {
        match self {
            Keys::Many(tokens) => tokens.fold(init, |acc, k| f(acc, MetaKey::new(k, false))),
            Keys::One(key) => key.into_iter().fold(init, f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse, ParserConfig};

    fn with<T>(line: &[u8], f: impl FnOnce(&Request<'_>) -> T) -> T {
        let (request, _) = parse(line, &ParserConfig::default()).expect("a valid request");
        f(&request)
    }

    #[test]
    fn each_command_says_its_class_keys_and_answerer() {
        let keys = |line: &[u8]| {
            with(line, |r| {
                r.keys().map(|k| k.bytes().to_vec()).collect::<Vec<_>>()
            })
        };
        assert_eq!(keys(b"get a b a\r\n"), [b"a", b"b", b"a"]);
        assert_eq!(keys(b"mg Zm9v b v\r\n"), [b"foo"]);
        assert_eq!(keys(b"set k 0 0 1\r\nv\r\n"), [b"k"]);
        assert!(keys(b"version\r\n").is_empty());
        let answerer = |line: &[u8]| with(line, |r| r.answerer());
        assert_eq!(
            answerer(b"incr k 1\r\n"),
            Answerer::KeyServer(RequestClass::Set)
        );
        assert_eq!(
            answerer(b"md k q\r\n"),
            Answerer::KeyServer(RequestClass::Delete)
        );
        assert_eq!(
            answerer(b"me k\r\n"),
            Answerer::KeyServer(RequestClass::Other)
        );
        assert_eq!(answerer(b"mn\r\n"), Answerer::Receiver);
        assert_eq!(answerer(b"stats items\r\n"), Answerer::EveryServer);
        assert_eq!(answerer(b"flush_all\r\n"), Answerer::EveryServer);
        assert_eq!(
            answerer(b"lru_crawler metadump all\r\n"),
            Answerer::Unmodelled
        );
        assert!(with(b"delete k noreply\r\n", |r| r.noreply()));
        assert!(!with(b"ms k 1 q\r\nv\r\n", |r| r.noreply()));
    }
}

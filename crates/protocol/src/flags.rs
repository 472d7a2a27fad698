//! The meta-protocol flag set: parsing the flag tokens after the key as memcached 1.6's
//! `_meta_flag_preparse` does (same accepted letters, same error precedence), and a compact
//! value that keeps them in request order for building the response.
//!
//! Not here: the per-command checks that come after the flags (opaque length, `M` modes,
//! item size; see `meta.rs`) or writing the response flags (`response.rs`).

use crate::base64::decode_key;
use crate::error::ErrorKind;
use crate::number::{safe_strtol, safe_strtoul, safe_strtoull};
use crate::tokens::Tokens;
use core::fmt;

/// The flags of a meta request. Copying it is cheap (no heap): the tokens stay in the
/// request buffer and are re-split by [`MetaFlags::iter`]; a bitmask answers
/// [`MetaFlags::has`]; the numeric tokens are parsed once.
#[derive(Clone, Copy, Default)]
pub struct MetaFlags<'a> {
    raw: &'a [u8],
    present: u64,
    ttl: i32,
    vivify_ttl: i32,
    recache_ttl: i32,
    client_flags: u32,
    compare_cas: u64,
    new_cas: u64,
    delta: u64,
    initial: u64,
    mode: u8,
    opaque: &'a [u8],
}

/// One flag as sent: its letter and the token after the letter (often empty).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaFlag<'a> {
    /// The flag letter, e.g. `b'v'`.
    pub letter: u8,
    /// The rest of the token, e.g. `b"30"` for `T30`.
    pub token: &'a [u8],
}

fn bit(letter: u8) -> u64 {
    match letter {
        b'A'..=b'z' => 1u64 << (letter - b'A'),
        _ => 0,
    }
}

impl<'a> MetaFlags<'a> {
    /// Parses the flag tokens in `raw` (space-separated), for a request whose key token is
    /// `key`. The error is the one memcached's preparse reports, with its precedence: an
    /// unknown letter or a repeat stops at once; a bad token is remembered and parsing goes
    /// on, a later bad token's message replacing an earlier one's; a bad `F` token has no
    /// message of its own (`CLIENT_ERROR bad command line format` unless another is set).
    pub fn parse(raw: &'a [u8], key: &[u8]) -> Result<Self, ErrorKind> {
        let mut f = MetaFlags {
            raw,
            ..MetaFlags::default()
        };
        let mut failed = false;
        let mut message: Option<ErrorKind> = None;
        let mut fail = |m: Option<ErrorKind>| {
            failed = true;
            if m.is_some() {
                message = m;
            }
        };
        for tok in Tokens::new(raw) {
            let letter = tok[0];
            let arg = &tok[1..];
            if letter >= 127 {
                // memcached 1.6.45 (1.6.18 said "duplicate flag").
                return Err(ErrorKind::BadCommandLineFormat);
            }
            if f.present & bit(letter) != 0 {
                return Err(ErrorKind::DuplicateFlag);
            }
            f.present |= bit(letter);
            match letter {
                b'b' => {
                    if decode_key(key).is_none() {
                        fail(Some(ErrorKind::KeyDecode));
                    }
                }
                b'N' | b'T' | b'R' => match safe_strtol(arg) {
                    Some(v) if letter == b'N' => f.vivify_ttl = v,
                    Some(v) if letter == b'T' => f.ttl = v,
                    Some(v) => f.recache_ttl = v,
                    None => fail(Some(ErrorKind::BadToken)),
                },
                b'O' => f.opaque = arg,
                b'l' | b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' | b'v' | b'h' | b'u'
                | b'q' | b'I' | b'x' => {}
                b'F' => match safe_strtoul(arg) {
                    Some(v) => f.client_flags = v,
                    None => fail(None),
                },
                b'C' => match safe_strtoull(arg) {
                    Some(v) => f.compare_cas = v,
                    None => fail(Some(ErrorKind::BadToken)),
                },
                b'E' => match safe_strtoull(arg) {
                    Some(v) => f.new_cas = v,
                    None => fail(Some(ErrorKind::BadToken)),
                },
                // memcached 1.6.45 checks the mode only where it applies (`ms`, `ma`), by its
                // first character; a bare `M` is no mode.
                b'M' => f.mode = tok.get(1).copied().unwrap_or(0),
                b'J' => match safe_strtoull(arg) {
                    Some(v) => f.initial = v,
                    None => fail(Some(ErrorKind::InvalidInitial)),
                },
                b'D' => match safe_strtoull(arg) {
                    Some(v) => f.delta = v,
                    None => fail(Some(ErrorKind::InvalidDeltaFlag)),
                },
                _ => return Err(ErrorKind::InvalidFlag),
            }
        }
        if failed {
            return Err(message.unwrap_or(ErrorKind::BadCommandLineFormat));
        }
        Ok(f)
    }

    /// Whether flag `letter` was given.
    pub fn has(&self, letter: u8) -> bool {
        self.present & bit(letter) != 0
    }

    /// The flags in request order (memcached returns flags in that order).
    pub fn iter(&self) -> MetaFlagIter<'a> {
        MetaFlagIter {
            tokens: Tokens::new(self.raw),
        }
    }

    /// The flag tokens as sent.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.raw
    }

    /// Number of flags.
    pub fn len(&self) -> usize {
        self.present.count_ones() as usize
    }

    /// Whether no flag was given.
    pub fn is_empty(&self) -> bool {
        self.present == 0
    }

    fn value<T: Copy>(&self, letter: u8, v: T) -> Option<T> {
        self.has(letter).then_some(v)
    }

    /// `T`: new TTL (memcached's exptime convention).
    pub fn ttl(&self) -> Option<i64> {
        self.value(b'T', i64::from(self.ttl))
    }

    /// `N`: autovivify on miss with this TTL.
    pub fn vivify_ttl(&self) -> Option<i64> {
        self.value(b'N', i64::from(self.vivify_ttl))
    }

    /// `R`: win the recache token if the remaining TTL is below this.
    pub fn recache_ttl(&self) -> Option<i64> {
        self.value(b'R', i64::from(self.recache_ttl))
    }

    /// `F`: client flags to store (`ms`).
    pub fn client_flags(&self) -> Option<u32> {
        self.value(b'F', self.client_flags)
    }

    /// `C`: CAS unique to compare.
    pub fn compare_cas(&self) -> Option<u64> {
        self.value(b'C', self.compare_cas)
    }

    /// `E`: the CAS unique the new item takes (memcached 1.6.45).
    pub fn new_cas(&self) -> Option<u64> {
        self.value(b'E', self.new_cas)
    }

    /// `D`: arithmetic delta (`ma`; memcached's default is 1).
    pub fn delta(&self) -> Option<u64> {
        self.value(b'D', self.delta)
    }

    /// `J`: initial value for an autovivified `ma` (default 0).
    pub fn initial(&self) -> Option<u64> {
        self.value(b'J', self.initial)
    }

    /// `M`: the mode character, unvalidated (`ms` and `ma` validate it).
    pub fn mode(&self) -> Option<u8> {
        self.value(b'M', self.mode)
    }

    /// `O`: the opaque token (without the `O`), echoed in the response.
    pub fn opaque(&self) -> Option<&'a [u8]> {
        self.value(b'O', self.opaque)
    }

    /// `q`: quiet mode (suppress the "nominal" reply: `EN` for mg, `HD` for ms/md/ma).
    pub fn quiet(&self) -> bool {
        self.has(b'q')
    }

    /// `b`: the key is base64.
    pub fn base64_key(&self) -> bool {
        self.has(b'b')
    }
}

impl PartialEq for MetaFlags<'_> {
    /// Equal when the same flags were given in the same order with the same tokens.
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for MetaFlags<'_> {}

impl fmt::Debug for MetaFlags<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(Tokens::new(self.raw).map(|t| t.escape_ascii().to_string()))
            .finish()
    }
}

/// Iterator over [`MetaFlags`] in request order.
#[derive(Clone, Debug)]
pub struct MetaFlagIter<'a> {
    tokens: Tokens<'a>,
}

impl<'a> Iterator for MetaFlagIter<'a> {
    type Item = MetaFlag<'a>;

    fn next(&mut self) -> Option<MetaFlag<'a>> {
        let tok = self.tokens.next()?;
        Some(MetaFlag {
            letter: tok[0],
            token: &tok[1..],
        })
    }
}

#[cfg(test)]
mod tests;

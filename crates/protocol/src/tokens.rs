//! Command-line framing and tokenizing as memcached 1.6.45's `try_read_command_ascii` and
//! its tokenizer (`mcmc_tokenize`) do, plus [`Tokens`], the borrowed token iterator the parsed
//! requests expose (multi-get keys, `stats` arguments).
//!
//! Not here: what the tokens mean (see `text.rs`, `meta.rs`). The framing rules:
//! - a line ends at the first `\n`; one `\r` before it is dropped unless the line is just
//!   `\r` (`text.rs` refuses a line that short anyway);
//! - a NUL is an ordinary byte of the line: 1.6.45's parser works on lengths (1.6.18 read
//!   the line as a C string, which a NUL ended);
//! - tokens are separated by `' '` only (a tab is part of a token);
//! - at most 23 tokens are split out; the remainder of the line is kept as a tail (only the
//!   multi-get commands read it).

use core::fmt;

/// Longest partial command line memcached buffers before giving up on the connection (it closes
/// it without a reply once more than this many bytes have arrived with no `\n`, unless the line
/// is a `get`/`gets`).
pub const MAX_PARTIAL_LINE: usize = 2048;

/// memcached's `MAX_TOKENS` minus the terminal token.
pub(crate) const MAX_SPLIT_TOKENS: usize = 23;

/// A complete command line found at the start of the buffer.
pub(crate) struct Line<'a> {
    /// The command text: without the line ending.
    pub text: &'a [u8],
    /// Bytes of the buffer the line occupies, `\n` included.
    pub consumed: usize,
}

/// Outcome of looking for a command line.
pub(crate) enum Framing<'a> {
    Line(Line<'a>),
    /// No `\n` yet; keep reading.
    Incomplete,
    /// No `\n` within [`MAX_PARTIAL_LINE`] bytes and not a multi-get: memcached closes.
    TooLong,
}

/// Finds the command line at the start of `buf`.
pub(crate) fn frame(buf: &[u8]) -> Framing<'_> {
    let Some(nl) = memchr::memchr(b'\n', buf) else {
        if buf.len() > MAX_PARTIAL_LINE && !is_large_multiget(buf) {
            return Framing::TooLong;
        }
        return Framing::Incomplete;
    };
    let mut text = &buf[..nl];
    if text.len() > 1 && text[text.len() - 1] == b'\r' {
        text = &text[..text.len() - 1];
    }
    Framing::Line(Line {
        text,
        consumed: nl + 1,
    })
}

/// memcached lets only `get ` and `gets ` lines (after at most 100 leading spaces) grow past
/// [`MAX_PARTIAL_LINE`] bytes; `gat` and `gats` are not exempt.
fn is_large_multiget(buf: &[u8]) -> bool {
    let spaces = buf.iter().take_while(|&&b| b == b' ').count();
    let rest = &buf[spaces..];
    spaces <= 100 && (rest.starts_with(b"get ") || rest.starts_with(b"gets "))
}

/// The first tokens of a line, as memcached's tokenizer splits them.
pub(crate) struct Tokenized<'a> {
    toks: [&'a [u8]; MAX_SPLIT_TOKENS],
    /// Number of tokens split out (memcached's `ntokens` is this plus one).
    pub n: usize,
}

impl<'a> Tokenized<'a> {
    /// Splits `line` on spaces, keeping at most [`MAX_SPLIT_TOKENS`] tokens.
    /// Inlined so that the token array is built in the caller's frame, not copied out.
    #[inline]
    pub fn new(line: &'a [u8]) -> Self {
        let mut toks: [&'a [u8]; MAX_SPLIT_TOKENS] = [&[]; MAX_SPLIT_TOKENS];
        let mut n = 0;
        let mut at = 0;
        while n < MAX_SPLIT_TOKENS {
            while at < line.len() && line[at] == b' ' {
                at += 1;
            }
            if at == line.len() {
                break;
            }
            let start = at;
            while at < line.len() && line[at] != b' ' {
                at += 1;
            }
            toks[n] = &line[start..at];
            n += 1;
        }
        Tokenized { toks, n }
    }

    /// Token `i`, or the empty slice past the last one (memcached's terminal token).
    pub fn get(&self, i: usize) -> &'a [u8] {
        if i < self.n {
            self.toks[i]
        } else {
            &[]
        }
    }

    /// The last token split out (memcached's `tokens[ntokens - 2]`).
    pub fn last(&self) -> &'a [u8] {
        self.get(self.n.wrapping_sub(1))
    }

    /// memcached's `set_noreply_maybe`: the last token is exactly `noreply`.
    pub fn noreply(&self) -> bool {
        self.n > 0 && self.last() == b"noreply"
    }
}

/// The text of `line` after its first `skip` tokens (leading spaces kept): how a multi-get's
/// keys or a command's arguments are exposed without copying.
pub(crate) fn after_tokens(line: &[u8], skip: usize) -> &[u8] {
    let mut rest = line;
    for _ in 0..skip {
        let start = rest.iter().position(|&b| b != b' ').unwrap_or(rest.len());
        rest = &rest[start..];
        let end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
        rest = &rest[end..];
    }
    rest
}

/// Space-separated tokens of a borrowed slice of the request (multi-get keys, `stats`
/// arguments). Iterating never allocates; copying the iterator restarts it.
#[derive(Clone, Copy, Default)]
pub struct Tokens<'a> {
    rest: &'a [u8],
}

impl<'a> Tokens<'a> {
    /// Tokens of `text`, split on spaces, empty tokens skipped.
    pub fn new(text: &'a [u8]) -> Self {
        Tokens { rest: text }
    }

    /// The raw text the tokens are split from (may have leading or repeated spaces).
    pub fn as_bytes(&self) -> &'a [u8] {
        self.rest
    }

    /// Whether there is no token at all.
    pub fn is_empty(&self) -> bool {
        self.rest.iter().all(|&b| b == b' ')
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        let start = self.rest.iter().position(|&b| b != b' ')?;
        let rest = &self.rest[start..];
        let end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
        self.rest = &rest[end..];
        Some(&rest[..end])
    }
}

impl PartialEq for Tokens<'_> {
    /// Equal when they yield the same tokens, whatever the spacing.
    fn eq(&self, other: &Self) -> bool {
        (*self).eq(*other)
    }
}

impl Eq for Tokens<'_> {}

impl fmt::Debug for Tokens<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries((*self).map(|t| t.escape_ascii().to_string()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(buf: &[u8]) -> (Vec<u8>, usize) {
        match frame(buf) {
            Framing::Line(l) => (l.text.to_vec(), l.consumed),
            _ => panic!("no line"),
        }
    }

    #[test]
    fn framing_rules() {
        assert_eq!(line(b"get a\r\nxx"), (b"get a".to_vec(), 7));
        assert_eq!(line(b"get a\n"), (b"get a".to_vec(), 6));
        assert_eq!(line(b"\r\n"), (b"\r".to_vec(), 2));
        assert_eq!(line(b"\n"), (b"".to_vec(), 1));
        assert_eq!(line(b"get a\r\r\n"), (b"get a\r".to_vec(), 8));
        assert_eq!(line(b"get a\0b\r\n"), (b"get a\0b".to_vec(), 9));
        assert!(matches!(frame(b"get a\r"), Framing::Incomplete));
        assert!(matches!(frame(&[b'x'; 2048]), Framing::Incomplete));
        assert!(matches!(frame(&[b'x'; 2049]), Framing::TooLong));
        let mut get = b"get ".to_vec();
        get.resize(5000, b'k');
        assert!(matches!(frame(&get), Framing::Incomplete));
    }

    #[test]
    fn tokenizer_caps_at_23() {
        let l: Vec<u8> = (0..30)
            .flat_map(|i| format!("t{i} ").into_bytes())
            .collect();
        let t = Tokenized::new(&l);
        assert_eq!(t.n, 23);
        assert_eq!(t.last(), b"t22");
        assert_eq!(t.get(23), b"");
    }

    #[test]
    fn tokens_iterate_and_compare() {
        let t = Tokens::new(b"  a bb  c ");
        assert_eq!(t.collect::<Vec<_>>(), vec![&b"a"[..], b"bb", b"c"]);
        assert_eq!(t, Tokens::new(b"a bb c"));
        assert!(Tokens::new(b"   ").is_empty());
        assert_eq!(after_tokens(b" gat 10  k1 k2", 2), b"  k1 k2");
    }
}

//! Base64 for meta-protocol binary keys (the `b` flag), bit-compatible with memcached 1.6's
//! `base64.c`, and a fixed-size stack buffer to decode a key into.
//!
//! Not a general-purpose base64: decoding follows memcached exactly, which is lenient in odd
//! ways (bytes outside the alphabet are skipped, decoding stops at the first padded block)
//! and strict in others (the count of alphabet bytes must be a non-zero multiple of 4). A
//! key that memcached accepts must decode to the same bytes here, and one it rejects
//! (`CLIENT_ERROR error decoding key`) must be rejected.

use core::fmt;
use core::ops::Deref;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Marks a byte outside the alphabet in [`DECODE`].
const INVALID: u8 = 0x80;

/// memcached's `dtable`: note that `=` decodes to 0 and counts as an alphabet byte.
const DECODE: [u8; 256] = {
    let mut t = [INVALID; 256];
    let mut i = 0;
    while i < 64 {
        t[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    t[b'=' as usize] = 0;
    t
};

/// Longest decoded key: memcached checks the 250-byte limit on the encoded token, and 250
/// encoded bytes decode to at most 187.
pub const MAX_DECODED_KEY_LEN: usize = crate::MAX_KEY_LEN / 4 * 3;

/// A decoded binary key held on the stack, so decoding needs no allocation.
#[derive(Clone, Copy)]
pub struct KeyBuf {
    buf: [u8; MAX_DECODED_KEY_LEN],
    len: u8,
}

impl KeyBuf {
    /// The decoded bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }
}

impl Deref for KeyBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl fmt::Debug for KeyBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "KeyBuf({:?})",
            self.as_bytes().escape_ascii().to_string()
        )
    }
}

impl PartialEq for KeyBuf {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for KeyBuf {}

/// Decodes `src` as memcached's `base64_decode` does, or `None` where memcached returns 0
/// (failure). `src` must be at most [`crate::MAX_KEY_LEN`] bytes (the parser checks this
/// first, as memcached does); longer input is rejected.
pub fn decode_key(src: &[u8]) -> Option<KeyBuf> {
    if src.len() > crate::MAX_KEY_LEN {
        return None;
    }
    let count = src
        .iter()
        .filter(|&&b| DECODE[usize::from(b)] != INVALID)
        .count();
    if count == 0 || count % 4 != 0 {
        return None;
    }
    let mut out = KeyBuf {
        buf: [0; MAX_DECODED_KEY_LEN],
        len: 0,
    };
    let mut pos = 0usize;
    let mut block = [0u8; 4];
    let mut n = 0;
    let mut pad = 0;
    for &b in src {
        let v = DECODE[usize::from(b)];
        if v == INVALID {
            continue;
        }
        if b == b'=' {
            pad += 1;
        }
        block[n] = v;
        n += 1;
        if n == 4 {
            out.buf[pos] = (block[0] << 2) | (block[1] >> 4);
            out.buf[pos + 1] = (block[1] << 4) | (block[2] >> 2);
            out.buf[pos + 2] = (block[2] << 6) | block[3];
            pos += 3;
            n = 0;
            if pad > 0 {
                match pad {
                    1 => pos -= 1,
                    2 => pos -= 2,
                    _ => return None,
                }
                break;
            }
        }
    }
    // memcached's "0 means failure" also rejects a key that decodes to nothing.
    if pos == 0 {
        return None;
    }
    out.len = pos as u8;
    Some(out)
}

/// Appends the standard padded base64 encoding of `src` (what memcached prints for the `k`
/// return flag of a binary key).
pub fn encode_into(out: &mut Vec<u8>, src: &[u8]) {
    let mut chunks = src.chunks_exact(3);
    for c in &mut chunks {
        out.extend_from_slice(&[
            ALPHABET[usize::from(c[0] >> 2)],
            ALPHABET[usize::from(((c[0] & 0x03) << 4) | (c[1] >> 4))],
            ALPHABET[usize::from(((c[1] & 0x0f) << 2) | (c[2] >> 6))],
            ALPHABET[usize::from(c[2] & 0x3f)],
        ]);
    }
    match *chunks.remainder() {
        [a] => out.extend_from_slice(&[
            ALPHABET[usize::from(a >> 2)],
            ALPHABET[usize::from((a & 0x03) << 4)],
            b'=',
            b'=',
        ]),
        [a, b] => out.extend_from_slice(&[
            ALPHABET[usize::from(a >> 2)],
            ALPHABET[usize::from(((a & 0x03) << 4) | (b >> 4))],
            ALPHABET[usize::from((b & 0x0f) << 2)],
            b'=',
        ]),
        _ => {}
    }
}

#[cfg(test)]
mod tests;

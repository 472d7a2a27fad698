//! memcached's binary SASL (`-S`), I/O-free: which requests a connection may send before it
//! authenticates, the three SASL requests, and their replies, as memcached 1.6.45's
//! `dispatch_bin_command`, `bin_list_sasl_mechs` and `process_bin_complete_sasl_auth`
//! (proto_bin.c) answer them.
//!
//! - Before authenticating, only `SASL List Mechs` (0x20), `SASL Auth` (0x21), `SASL Step`
//!   (0x22) and `Version` (0x0b) are served; anything else is answered "Auth failure."
//!   (status 0x20) and the connection closes.
//! - List Mechs answers the mechanisms, space-separated (`PLAIN`: memfleet checks a password
//!   database, as memcached built with `--enable-sasl-pwdb` does).
//! - Auth with `PLAIN` carries `authzid NUL user NUL password`; success answers
//!   "Authenticated", failure "Auth failure." (status 0x20) and the connection stays open.
//!   An unknown mechanism fails the same way. Step fails: PLAIN has no second step.
//! - A mechanism name over 32 bytes, or data over [`MAX_SASL_DATA`] (memfleet's bound: memcached
//!   reads it into an item), is "Invalid arguments" and the body is skipped.
//!
//! Header problems that memcached checks first (bad magic, a key or extras longer than the
//! body, a huge body) are left to the ordinary parser (`binary::parse`), which answers them as without SASL.

use super::error::{BinErrorKind, BinRejection};
use super::response::{self, ReplyTo, Status};
use super::{Header, Opcode, HEADER_LEN, REQUEST_MAGIC};

/// `SASL List Mechs`.
pub const LIST_MECHS: u8 = 0x20;
/// `SASL Auth`.
pub const AUTH: u8 = 0x21;
/// `SASL Step`.
pub const STEP: u8 = 0x22;
/// The longest mechanism name memcached takes (`MAX_SASL_MECH_LEN`).
pub const MAX_MECH_LEN: usize = 32;
/// The most SASL data a request may carry: PLAIN's `authzid NUL user NUL password`, where
/// memcached's password database takes lines of 256 bytes.
pub const MAX_SASL_DATA: usize = 4096;
/// The mechanisms offered.
pub const MECHANISMS: &[u8] = b"PLAIN";

/// A SASL request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaslRequest<'a> {
    /// List the mechanisms.
    ListMechs,
    /// Start authenticating with `mech`, its first data `data`.
    Auth {
        /// The mechanism's name.
        mech: &'a [u8],
        /// Its data.
        data: &'a [u8],
    },
    /// A later step of a mechanism.
    Step {
        /// The mechanism's name.
        mech: &'a [u8],
        /// Its data.
        data: &'a [u8],
    },
}

/// What a connection with SASL on does with the request at the start of its buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum SaslGate<'a> {
    /// Not a SASL request, and allowed: parse and run it as usual (`binary::parse`, which
    /// also answers malformed headers).
    Pass,
    /// More bytes are needed.
    Incomplete,
    /// The connection has not authenticated: answer "Auth failure." and close.
    Refuse(ReplyTo),
    /// A SASL request, and the bytes it occupies.
    Sasl(SaslRequest<'a>, ReplyTo, usize),
    /// A malformed SASL request: answer and skip (or close) as the rejection says.
    Invalid(BinRejection),
}

/// Sorts the request at the start of `buf` on a connection with SASL on that has
/// (`authenticated`) or has not authenticated yet.
pub fn gate(buf: &[u8], authenticated: bool) -> SaslGate<'_> {
    let Some(h) = Header::read(buf) else {
        return SaslGate::Incomplete;
    };
    let ext = usize::from(h.extras_len);
    let key_len = usize::from(h.key_len);
    let body = h.body_len as usize;
    // What memcached checks before authentication: left to the ordinary parser.
    if h.magic != REQUEST_MAGIC || ext + key_len > body || body > i32::MAX as usize / 2 {
        return SaslGate::Pass;
    }
    let to = ReplyTo {
        opcode: h.opcode,
        opaque: h.opaque,
    };
    let sasl = matches!(h.opcode, LIST_MECHS | AUTH | STEP);
    if !sasl {
        return if authenticated || h.opcode == Opcode::Version.as_u8() {
            SaslGate::Pass
        } else {
            SaslGate::Refuse(to)
        };
    }
    let head = HEADER_LEN + ext + key_len;
    let reject = |kind, skip| {
        SaslGate::Invalid(BinRejection {
            kind,
            reply_to: to,
            skip,
            stale_key_len: 0,
        })
    };
    if h.opcode == LIST_MECHS {
        return if ext == 0 && key_len == 0 && body == 0 {
            SaslGate::Sasl(SaslRequest::ListMechs, to, HEADER_LEN)
        } else {
            // memcached's protocol error: "Invalid arguments", then it closes.
            reject(BinErrorKind::InvalidArguments, head)
        };
    }
    if ext != 0 || key_len == 0 {
        return reject(BinErrorKind::InvalidArguments, head);
    }
    let data_len = body - key_len;
    if key_len > MAX_MECH_LEN || data_len > MAX_SASL_DATA {
        // "Invalid arguments", the data swallowed, the connection kept.
        return reject(BinErrorKind::SaslTooLong, HEADER_LEN + body);
    }
    if buf.len() < HEADER_LEN + body {
        return SaslGate::Incomplete;
    }
    let mech = &buf[HEADER_LEN..head];
    let data = &buf[head..HEADER_LEN + body];
    let request = if h.opcode == AUTH {
        SaslRequest::Auth { mech, data }
    } else {
        SaslRequest::Step { mech, data }
    };
    SaslGate::Sasl(request, to, HEADER_LEN + body)
}

/// The user and password of PLAIN's data (`authzid NUL user NUL password`, RFC 4616), or
/// `None` when it is not of that form.
pub fn plain_credentials(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut parts = data.splitn(3, |&b| b == 0);
    let _authzid = parts.next()?;
    let user = parts.next()?;
    let password = parts.next()?;
    (!user.is_empty()).then_some((user, password))
}

/// Appends a SASL request packet (a client's, or a proxy logging in): `opcode` one of
/// [`LIST_MECHS`], [`AUTH`], [`STEP`], the mechanism as the key, `data` as the value.
pub fn request(out: &mut Vec<u8>, opcode: u8, mech: &[u8], data: &[u8], opaque: u32) {
    let key_len = u16::try_from(mech.len()).expect("a mechanism name under 64 KiB");
    Header {
        magic: REQUEST_MAGIC,
        opcode,
        key_len,
        extras_len: 0,
        data_type: 0,
        vbucket_or_status: 0,
        body_len: u32::try_from(mech.len() + data.len()).expect("SASL data under 4 GiB"),
        opaque,
        cas: 0,
    }
    .write(out);
    out.extend_from_slice(mech);
    out.extend_from_slice(data);
}

/// Appends PLAIN's Auth request for `user` and `password` (`NUL user NUL password`: no
/// authorization identity), as [`plain_credentials`] reads it.
pub fn plain_auth(out: &mut Vec<u8>, user: &[u8], password: &[u8]) {
    let mut data = Vec::with_capacity(2 + user.len() + password.len());
    data.push(0);
    data.extend_from_slice(user);
    data.push(0);
    data.extend_from_slice(password);
    request(out, AUTH, b"PLAIN", &data, 0);
}

/// List Mechs' reply.
pub fn mechanisms(out: &mut Vec<u8>, to: ReplyTo) {
    response::header(out, to, Status::Success, 0, 0, MECHANISMS.len() as u32, 0);
    out.extend_from_slice(MECHANISMS);
}

/// A successful Auth's reply.
pub fn authenticated(out: &mut Vec<u8>, to: ReplyTo) {
    const BODY: &[u8] = b"Authenticated";
    response::header(out, to, Status::Success, 0, 0, BODY.len() as u32, 0);
    out.extend_from_slice(BODY);
}

/// A failed Auth or Step, or a request before authenticating: "Auth failure.".
pub fn auth_failure(out: &mut Vec<u8>, to: ReplyTo) {
    response::error(out, to, Status::AuthError);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(opcode: u8, key: &[u8], data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        request(&mut out, opcode, key, data, 7);
        out
    }

    #[test]
    fn only_sasl_and_version_pass_before_authenticating() {
        let get = packet(Opcode::Get.as_u8(), b"k", b"");
        assert!(matches!(gate(&get, false), SaslGate::Refuse(to) if to.opaque == 7));
        assert_eq!(gate(&get, true), SaslGate::Pass);
        let version = packet(Opcode::Version.as_u8(), b"", b"");
        assert_eq!(gate(&version, false), SaslGate::Pass);
        let list = packet(LIST_MECHS, b"", b"");
        assert!(matches!(
            gate(&list, false),
            SaslGate::Sasl(SaslRequest::ListMechs, _, HEADER_LEN)
        ));
        let auth = packet(AUTH, b"PLAIN", b"\0alice\0pw");
        assert!(matches!(
            gate(&auth, false),
            SaslGate::Sasl(SaslRequest::Auth { mech: b"PLAIN", data: b"\0alice\0pw" }, _, n) if n == auth.len()
        ));
        assert_eq!(gate(&auth[..auth.len() - 1], false), SaslGate::Incomplete);
        assert_eq!(gate(&auth[..10], false), SaslGate::Incomplete);
    }

    #[test]
    fn malformed_and_oversized_sasl_requests_are_invalid_arguments() {
        let close = |g: SaslGate<'_>| match g {
            SaslGate::Invalid(r) => (r.kind, r.close(), r.skip),
            other => panic!("{other:?}"),
        };
        let list_with_body = packet(LIST_MECHS, b"", b"x");
        assert_eq!(
            close(gate(&list_with_body, false)),
            (BinErrorKind::InvalidArguments, true, HEADER_LEN)
        );
        let auth_without_mech = packet(AUTH, b"", b"data");
        assert!(close(gate(&auth_without_mech, false)).1);
        let long_mech = packet(AUTH, &[b'M'; 33], b"");
        assert_eq!(
            close(gate(&long_mech, false)),
            (BinErrorKind::SaslTooLong, false, HEADER_LEN + 33)
        );
        let big = vec![b'x'; MAX_SASL_DATA + 1];
        let long_data = packet(AUTH, b"PLAIN", &big);
        // Refused from the header alone: the data is skipped as it arrives.
        assert_eq!(
            close(gate(&long_data[..HEADER_LEN], false)),
            (BinErrorKind::SaslTooLong, false, long_data.len())
        );
    }

    #[test]
    fn a_plain_auth_request_reads_back_as_its_user_and_password() {
        let mut out = Vec::new();
        plain_auth(&mut out, b"alice", b"s3cret");
        match gate(&out, false) {
            SaslGate::Sasl(
                SaslRequest::Auth {
                    mech: b"PLAIN",
                    data,
                },
                _,
                n,
            ) => {
                assert_eq!(n, out.len());
                assert_eq!(
                    plain_credentials(data),
                    Some((&b"alice"[..], &b"s3cret"[..]))
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn plain_data_is_authzid_user_password() {
        assert_eq!(
            plain_credentials(b"\0alice\0s3cret"),
            Some((&b"alice"[..], &b"s3cret"[..]))
        );
        assert_eq!(
            plain_credentials(b"admin\0alice\0with\0nul"),
            Some((&b"alice"[..], &b"with\0nul"[..]))
        );
        assert_eq!(plain_credentials(b"\0\0pw"), None);
        assert_eq!(plain_credentials(b"alice\0pw"), None);
    }
}

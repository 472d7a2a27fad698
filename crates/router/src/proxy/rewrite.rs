//! Requests rewritten for forwarding: what goes to a server always gets a reply, so
//! `noreply` and meta `q` are stripped going out (and applied to the reply coming back).

use memfleet_protocol::{GetKind, Request};

/// Replies a quiet meta request does not send: a get's miss, a store's or delete's success,
/// an arithmetic's success (with or without the value).
pub(super) const QUIET_MG: &[&[u8]] = &[b"EN"];
pub(super) const QUIET_MS_MD: &[&[u8]] = &[b"HD"];
pub(super) const QUIET_MA: &[&[u8]] = &[b"HD", b"VA"];

/// A meta request's line split around its key: (`"mg "`, key as written, the rest).
pub(super) fn split_meta(bytes: &[u8]) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let start = bytes
        .iter()
        .position(|&b| b == b' ')
        .map_or(bytes.len(), |i| i + 1);
    let end = bytes[start..]
        .iter()
        .position(|&b| matches!(b, b' ' | b'\r' | b'\n'))
        .map_or(bytes.len(), |i| start + i);
    (
        bytes[..start].to_vec(),
        bytes[start..end].to_vec(),
        bytes[end..].to_vec(),
    )
}

/// `request` encoded, its line ended.
fn request_bytes(request: &Request<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    request.encode(&mut out);
    if !out.ends_with(b"\r\n") {
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// `flush_all [delay] noreply` without its `noreply`.
pub(super) fn raw_without_noreply(raw: &[u8], noreply: bool) -> Vec<u8> {
    if !noreply {
        return raw.to_vec();
    }
    let line = raw.strip_suffix(b"\r\n").unwrap_or(raw);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let words: Vec<&[u8]> = line
        .split(|&b| b == b' ')
        .filter(|w| !w.is_empty() && *w != b"noreply")
        .collect();
    let mut out = words.join(&b' ');
    out.extend_from_slice(b"\r\n");
    out
}

/// A meta request's bytes with its `q` flag removed (the command line only; a data block
/// after it is kept as is).
pub(super) fn without_quiet(raw: &[u8]) -> Vec<u8> {
    let end = raw
        .iter()
        .position(|&b| b == b'\n')
        .map_or(raw.len(), |i| i + 1);
    let (line, rest) = raw.split_at(end);
    let text = line.strip_suffix(b"\n").unwrap_or(line);
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    let words: Vec<&[u8]> = text
        .split(|&b| b == b' ')
        .filter(|w| !w.is_empty())
        .enumerate()
        .filter(|(i, w)| *i < 2 || *w != b"q")
        .map(|(_, w)| w)
        .collect();
    let mut out = words.join(&b' ');
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(rest);
    out
}

/// A retrieval's command word as sent (`gat` and `gats` with their exptime).
pub(super) fn get_head(g: &memfleet_protocol::Get<'_>) -> Vec<u8> {
    match g.kind {
        GetKind::Gat | GetKind::Gats => {
            format!("{} {}", String::from_utf8_lossy(g.kind.name()), g.exptime).into_bytes()
        }
        _ => g.kind.name().to_vec(),
    }
}

/// A classic one-key command that takes `noreply` (storage, delete, arithmetic, touch), as
/// forwarded: its key, its bytes with `noreply` cleared, and whether the client asked for
/// no reply. `None` for any other request.
pub(super) fn replying<'a>(request: &Request<'a>) -> Option<(&'a [u8], Vec<u8>, bool)> {
    let mut sent = *request;
    let (key, noreply) = match &mut sent {
        Request::Store(s) => (s.key, std::mem::replace(&mut s.noreply, false)),
        Request::Delete { key, noreply, .. }
        | Request::Arith { key, noreply, .. }
        | Request::Touch { key, noreply, .. } => (*key, std::mem::replace(noreply, false)),
        _ => return None,
    };
    Some((key, request_bytes(&sent), noreply))
}

//! The normalization rules of the exceptions table (`EXCEPTIONS` in `differential.rs`),
//! applied to each server's reply before the byte comparison. Each rewrite names its rule.
//! Nothing else is touched: a reply that does not parse is compared raw.

/// Index of `v` among the CAS values seen in this case, adding it if new (rules `cas-*`).
fn cas_index(seen: &mut Vec<u64>, v: u64) -> usize {
    match seen.iter().position(|&s| s == v) {
        Some(i) => i,
        None => {
            seen.push(v);
            seen.len() - 1
        }
    }
}

fn parse_u64(t: &[u8]) -> Option<u64> {
    if t.is_empty() || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(t).ok()?.parse().ok()
}

/// One meta return flag.
fn meta_flag(tok: &[u8], cas: &mut Vec<u64>) -> Vec<u8> {
    let (f, rest) = match tok.split_first() {
        Some((f, rest)) => (*f, rest),
        None => return tok.to_vec(),
    };
    match f {
        // Rule cas-meta.
        b'c' => match parse_u64(rest) {
            Some(v) => format!("c#{}", cas_index(cas, v)).into_bytes(),
            None => tok.to_vec(),
        },
        // Rule ttl-remaining.
        b't' => match parse_u64(rest) {
            Some(v) if v > 0 => format!("t{}", v.div_ceil(10) * 10).into_bytes(),
            _ => tok.to_vec(),
        },
        // Rule last-access.
        b'l' if parse_u64(rest).is_some() => b"l*".to_vec(),
        _ => tok.to_vec(),
    }
}

/// Normalizes a text/meta reply stream, walking it line by line and skipping data blocks
/// (`VALUE`, `VA`) whole so that values are compared raw.
pub fn text(raw: &[u8], cas: &mut Vec<u64>) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut pos = 0;
    while pos < raw.len() {
        let Some(nl) = raw[pos..].iter().position(|&b| b == b'\n') else {
            out.extend_from_slice(&raw[pos..]);
            break;
        };
        let line = &raw[pos..pos + nl + 1];
        pos += nl + 1;
        let Some(content) = line.strip_suffix(b"\r\n") else {
            out.extend_from_slice(line);
            continue;
        };
        let toks: Vec<&[u8]> = content.split(|&b| b == b' ').collect();
        let mut data_len = None;
        let new: Vec<Vec<u8>> = match toks[0] {
            b"VALUE" if toks.len() == 4 || toks.len() == 5 => {
                data_len = parse_u64(toks[3]);
                let mut v: Vec<Vec<u8>> = toks[..4].iter().map(|t| t.to_vec()).collect();
                if toks.len() == 5 {
                    // Rule cas-text.
                    v.push(match parse_u64(toks[4]) {
                        Some(c) => format!("#{}", cas_index(cas, c)).into_bytes(),
                        None => toks[4].to_vec(),
                    });
                }
                v
            }
            b"VA" if toks.len() >= 2 => {
                data_len = parse_u64(toks[1]);
                let mut v = vec![toks[0].to_vec(), toks[1].to_vec()];
                v.extend(toks[2..].iter().map(|t| meta_flag(t, cas)));
                v
            }
            b"HD" | b"EN" | b"NF" | b"NS" | b"EX" => {
                let mut v = vec![toks[0].to_vec()];
                v.extend(toks[1..].iter().map(|t| meta_flag(t, cas)));
                v
            }
            // Rule me-internals.
            b"ME" if toks.len() >= 3 => vec![b"ME".to_vec(), toks[1].to_vec(), b"*".to_vec()],
            // Rule stats-values.
            b"STAT" if toks.len() >= 3 => vec![b"STAT".to_vec(), toks[1].to_vec(), b"*".to_vec()],
            // Rule version.
            b"VERSION" if toks.len() >= 2 => vec![b"VERSION".to_vec(), b"*".to_vec()],
            _ => toks.iter().map(|t| t.to_vec()).collect(),
        };
        out.extend_from_slice(&new.join(&b' '));
        out.extend_from_slice(b"\r\n");
        if let Some(n) = data_len {
            let n = (n as usize).saturating_add(2).min(raw.len() - pos);
            out.extend_from_slice(&raw[pos..pos + n]);
            pos += n;
        }
    }
    out
}

/// Renders a binary stream frame by frame, every header field spelled out, so that equal
/// renderings mean equal bytes except where a rule applies (only if `normalize`: requests
/// are rendered for display as they are).
pub fn binary(raw: &[u8], cas: &mut Vec<u64>, normalize: bool) -> Vec<u8> {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut pos = 0;
    while raw.len() - pos >= 24 {
        let h = &raw[pos..pos + 24];
        if h[0] != 0x81 && h[0] != 0x80 {
            break;
        }
        let key_len = u16::from_be_bytes([h[2], h[3]]) as usize;
        let ext_len = h[4] as usize;
        let body = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
        if raw.len() - pos < 24 + body || key_len + ext_len > body {
            break;
        }
        let op = h[1];
        let status = u16::from_be_bytes([h[6], h[7]]);
        let opaque = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
        let c = u64::from_be_bytes(h[16..24].try_into().unwrap());
        let b = &raw[pos + 24..pos + 24 + body];
        let (extras, rest) = b.split_at(ext_len);
        let (key, value) = rest.split_at(key_len);
        // Rule cas-binary.
        let c = if c == 0 || !normalize {
            c.to_string()
        } else {
            format!("#{}", cas_index(cas, c))
        };
        // Rule version: the body is the version string, so its length differs too.
        let version = normalize && op == 0x0b && status == 0;
        let body_shown = if version {
            "*".to_string()
        } else {
            body.to_string()
        };
        let _ = write!(
            out,
            "[magic={:02x} op={op:02x} status={status:04x} datatype={:02x} opaque={opaque:08x} cas={c} \
             extlen={ext_len} keylen={key_len} bodylen={body_shown}] extras={:02x?} key=\"{}\" ",
            h[0],
            h[5],
            extras,
            crate::differential::harness::escape(key)
        );
        if version {
            out.push_str("value=*\n");
        } else {
            let _ = writeln!(
                out,
                "value=\"{}\"",
                crate::differential::harness::escape(value)
            );
        }
        pos += 24 + body;
    }
    if pos < raw.len() {
        let _ = writeln!(
            out,
            "<unframed: \"{}\">",
            crate::differential::harness::escape(&raw[pos..])
        );
    }
    out.into_bytes()
}

/// Rule stats-names: drops the `STAT` lines whose name only one of the two replies has,
/// except memfleet-only names that do not start with `segcache_`, `lease_`, `holdoff_` or `udp_`
/// and are not among the names memcached 1.6.45 prints that the reference (Debian's 1.6.18)
/// does not (an unexpected name is still a difference). Other lines are kept in order.
pub fn shared_stats(reference: &[u8], subject: &[u8]) -> (Vec<u8>, Vec<u8>) {
    fn memfleet_only(name: &[u8]) -> bool {
        const NEWER_MEMCACHED: [&[u8]; 2] = [
            b"slab_reassign_busy_nomem",
            b"slab_reassign_last_busy_status",
        ];
        [&b"segcache_"[..], b"lease_", b"holdoff_", b"udp_"]
            .iter()
            .any(|p| name.starts_with(p))
            || NEWER_MEMCACHED.contains(&name)
    }
    fn name(line: &[u8]) -> Option<&[u8]> {
        let rest = line.strip_prefix(b"STAT ")?;
        rest.split(|&b| b == b' ').next()
    }
    fn names(reply: &[u8]) -> Vec<&[u8]> {
        reply.split(|&b| b == b'\n').filter_map(name).collect()
    }
    let (rn, sn) = (names(reference), names(subject));
    let keep = |reply: &[u8], other: &[&[u8]], subject: bool| -> Vec<u8> {
        let mut out = Vec::with_capacity(reply.len());
        for line in reply.split_inclusive(|&b| b == b'\n') {
            let drop =
                name(line).is_some_and(|n| !other.contains(&n) && (!subject || memfleet_only(n)));
            if !drop {
                out.extend_from_slice(line);
            }
        }
        out
    };
    (keep(reference, &sn, false), keep(subject, &rn, true))
}

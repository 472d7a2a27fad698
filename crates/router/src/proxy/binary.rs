//! A binary-protocol client (its first byte `0x80`, as memcached's `-B auto` tells them
//! apart): each request is carried to the servers as the meta request that does the same
//! (`memfleet_protocol::binary::bridge`), routed as a text client's request is, and its
//! reply turned back into the binary response memcached would send. Noop, version and quit
//! are answered here; pipelined quiet requests keep their order with the noop after them.
//!
//! With `--auth-file`, a binary client authenticates as memcached's `-S` asks: binary SASL
//! PLAIN, against the same users as the text protocol's `-Y` authentication. Until it has,
//! only the SASL requests and `version` are answered; anything else gets "Auth failure." and
//! the connection closes (`memfleet_protocol::binary::sasl`, the server's rules). Without
//! `--auth-file`, the SASL requests are unknown commands, as to a memcached without `-S`.

use super::queued::{local, QueuedReply};
use super::{keep_unparsed, read_more, route_request, skip, swallowed, Routed};
use crate::reloadable::{ClientAuth, RouteSlot, ServedTopology};
use memfleet_authfile::Credentials;
use memfleet_client::conn_stats::Stamp;
use memfleet_client::RouteContext;
use memfleet_protocol::binary::bridge::{self, Carried, LocalRequest, Pending};
use memfleet_protocol::binary::sasl::{self, SaslGate, SaslRequest};
use memfleet_protocol::binary::{self as bin, response, BinError, BinRejection, ReplyTo};
use memfleet_protocol::ParserConfig;
use std::sync::Arc;
use tokio::sync::mpsc;

/// What one request of a binary client leads to.
enum Next {
    /// A reply to queue; parse on.
    Reply(QueuedReply),
    /// Replies to queue, then close.
    Close(Vec<u8>),
}

/// Reads, parses and dispatches a binary client's requests (`buf` holds what was read
/// first) until it closes or must be closed.
pub(super) async fn read_requests(
    slot: &RouteSlot,
    served: &ServedTopology,
    auth: &ClientAuth,
    mut rd: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    mut buf: Vec<u8>,
    tx: &mpsc::Sender<(QueuedReply, Stamp)>,
    ctx: RouteContext,
) {
    let mut parsed_for = slot.load_full();
    let mut cfg = ParserConfig::with_max_item_size(parsed_for.item_size_max());
    let mut swallow = 0usize;
    // Nothing to pass when the router does not require authentication.
    let mut authenticated = auth.load().is_none();
    let mut unread = true;
    'read: loop {
        if !read_more(&mut rd, &mut buf, &mut unread).await {
            break;
        }
        let read = Stamp::now();
        let mut at = swallowed(&buf, &mut swallow);
        while at < buf.len() {
            let input = &buf[at..];
            // Judged by the auth file as loaded now (a reload applies to the next attempt).
            let credentials = auth.load_full();
            let gate = match &credentials {
                Some(_) => sasl::gate(input, authenticated),
                None => SaslGate::Pass,
            };
            let (next, used) = match gate {
                SaslGate::Incomplete => break,
                SaslGate::Refuse(to) => {
                    let mut out = Vec::new();
                    sasl::auth_failure(&mut out, to);
                    (Next::Close(out), 0)
                }
                SaslGate::Sasl(request, to, used) => {
                    let mut out = Vec::new();
                    let users = credentials.as_deref().expect("SASL is on");
                    authenticated |= answer_sasl(users, &request, to, &mut out);
                    (Next::Reply(local(out)), used)
                }
                SaslGate::Invalid(rejection) => {
                    match rejected(&rejection, input.len(), &mut swallow) {
                        Some(next) => next,
                        None => break 'read,
                    }
                }
                SaslGate::Pass => {
                    let root = slot.load_full();
                    if !Arc::ptr_eq(&root, &parsed_for) {
                        cfg = ParserConfig::with_max_item_size(root.item_size_max());
                        parsed_for = root.clone();
                    }
                    match bin::parse(input, &cfg) {
                        Ok((request, used)) => (
                            carry(&root, served, ctx, bridge::to_text(&request), &cfg, read),
                            used,
                        ),
                        Err(BinError::Incomplete) => break,
                        Err(BinError::Invalid(rejection)) => {
                            match rejected(&rejection, input.len(), &mut swallow) {
                                Some(next) => next,
                                None => break 'read,
                            }
                        }
                    }
                }
            };
            at += used;
            match next {
                Next::Reply(reply) => {
                    if tx.send((reply, read)).await.is_err() {
                        break 'read;
                    }
                }
                Next::Close(last) => {
                    if !last.is_empty() {
                        let _ = tx.send((local(last), read)).await;
                    }
                    let _ = tx.send((QueuedReply::Close, read)).await;
                    break 'read;
                }
            }
        }
        if !keep_unparsed(&mut buf, at, &cfg) {
            let _ = tx.send((QueuedReply::Close, read)).await;
            break;
        }
    }
}

/// memcached's answer to a malformed request: its error packet, then either the bytes to
/// skip (of `available` buffered; the rest counted in `swallow`, dropped as it arrives) or a
/// close. `None`: close silently.
fn rejected(
    rejection: &BinRejection,
    available: usize,
    swallow: &mut usize,
) -> Option<(Next, usize)> {
    let mut out = Vec::new();
    rejection.reply(&mut out);
    if rejection.close() {
        return (!out.is_empty()).then_some((Next::Close(out), 0));
    }
    let skipped = skip(rejection.skip, available, swallow);
    Some((Next::Reply(local(out)), skipped))
}

/// Answers one SASL request against `users`; true when it authenticated the connection.
fn answer_sasl(
    users: &Credentials,
    request: &SaslRequest<'_>,
    to: ReplyTo,
    out: &mut Vec<u8>,
) -> bool {
    let accepted = match *request {
        SaslRequest::ListMechs => {
            sasl::mechanisms(out, to);
            return false;
        }
        SaslRequest::Auth { mech, data } if mech == b"PLAIN" => sasl::plain_credentials(data)
            .is_some_and(|(user, password)| users.accepts_pair(user, password)),
        // An unknown mechanism, or a step (PLAIN has one step only).
        SaslRequest::Auth { .. } | SaslRequest::Step { .. } => false,
    };
    if accepted {
        sasl::authenticated(out, to);
    } else {
        sasl::auth_failure(out, to);
    }
    accepted
}

/// Routes a carried request down `root` (or answers it here), its reply made binary.
fn carry(
    root: &Arc<memfleet_client::Route>,
    served: &ServedTopology,
    ctx: RouteContext,
    carried: Carried,
    cfg: &ParserConfig,
    read: Stamp,
) -> Next {
    let (text, pending) = match carried {
        Carried::Local(LocalRequest::Noop(to)) => {
            let mut out = Vec::new();
            response::success(&mut out, to, 0);
            return Next::Reply(local(out));
        }
        Carried::Local(LocalRequest::Version(to)) => {
            let mut out = Vec::new();
            response::version(&mut out, to, super::local::version().as_bytes());
            return Next::Reply(local(out));
        }
        Carried::Local(LocalRequest::Quit(to, quiet)) => {
            let mut out = Vec::new();
            if !quiet {
                response::success(&mut out, to, 0);
            }
            return Next::Close(out);
        }
        Carried::Text(text, pending) => (text, pending),
    };
    let binary = |pending: &Pending, reply: &[u8]| {
        let mut out = Vec::new();
        pending.reply(reply, &mut out);
        out
    };
    // The carried request is well formed by construction; were it not, the client hears
    // the text parser's complaint as an error packet.
    let request = match memfleet_protocol::parse(&text, cfg) {
        Ok((request, _)) => request,
        Err(e) => {
            let reply = match e {
                memfleet_protocol::ParseError::Invalid(r) => r.reply().to_vec(),
                memfleet_protocol::ParseError::Incomplete => b"ERROR\r\n".to_vec(),
            };
            return Next::Reply(local(binary(&pending, &reply)));
        }
    };
    Next::Reply(
        match route_request(root, served, ctx, &request, &text, read) {
            Routed::Queued(QueuedReply::Reply(reply)) => {
                QueuedReply::Reply(Box::pin(async move { binary(&pending, &reply.await) }))
            }
            Routed::Queued(QueuedReply::Ready { bytes, .. }) => local(binary(&pending, &bytes)),
            Routed::Queued(QueuedReply::Close) => QueuedReply::Close,
            Routed::Refused(line) => local(binary(&pending, line.as_deref().unwrap_or_default())),
        },
    )
}

//! Answering one reply for several destinations (replicated writes, broadcasts).
//!
//! The rules, from what a client may conclude from a reply:
//! - a **delete** answers an error if any destination could neither take nor spool it (the
//!   client must not believe it happened), else `DELETED` if any destination deleted the
//!   key, else `NOT_FOUND` (a spooled delete answers `NOT_FOUND`: nothing is known yet);
//! - a **replicated write** answers success once its [`WritePolicy`] is met (any, a majority
//!   or all replicas stored it), else the worst reply;
//! - anything else answers the worst reply.

use super::request::{ReplyFuture, RouteReply};
use memfleet_protocol::reply::{self, Verdict};
use memfleet_routing::WritePolicy;

/// How bad a reply is, for answering the worst of several: a failure, then a server error,
/// then a refusal (not found, not stored, exists), then success.
pub(super) fn badness(reply: &RouteReply) -> u8 {
    match reply {
        Err(_) => 4,
        Ok(r) => match reply::verdict(r) {
            Verdict::Failed => 3,
            Verdict::Refused => 2,
            Verdict::Success => 1,
        },
    }
}

/// Waits for every call; answers the worst reply (the first of equally bad ones).
pub(super) fn all_sync(calls: Vec<ReplyFuture>) -> ReplyFuture {
    Box::pin(async move { worst(futures_util::future::join_all(calls).await) })
}

/// Waits for every call of a delete: an error if any failed, else a deletion if any
/// deleted, else the first refusal.
pub(super) fn all_deleted(calls: Vec<ReplyFuture>) -> ReplyFuture {
    Box::pin(async move {
        let replies = futures_util::future::join_all(calls).await;
        if replies.iter().any(|r| badness(r) >= 3) {
            return worst(replies);
        }
        let mut replies = replies.into_iter();
        let first = replies
            .next()
            .expect("a route has at least one destination");
        if badness(&first) == 1 {
            return first;
        }
        replies.find(|r| badness(r) == 1).unwrap_or(first)
    })
}

/// Waits for every replica's reply to a write; answers a success once `policy` is met.
pub(super) fn by_policy(calls: Vec<ReplyFuture>, policy: WritePolicy) -> ReplyFuture {
    let n = calls.len();
    let needed = match policy {
        WritePolicy::Any => 1,
        WritePolicy::Majority => n / 2 + 1,
        WritePolicy::All => n,
    };
    Box::pin(async move {
        let replies = futures_util::future::join_all(calls).await;
        let stored = replies.iter().filter(|r| badness(r) == 1).count();
        if stored >= needed {
            let mut replies = replies;
            let i = replies
                .iter()
                .position(|r| badness(r) == 1)
                .expect("counted");
            return replies.swap_remove(i);
        }
        worst(replies)
    })
}

/// The worst of `replies` (the first of equally bad ones).
fn worst(replies: Vec<RouteReply>) -> RouteReply {
    let mut worst: Option<RouteReply> = None;
    for r in replies {
        if worst.as_ref().is_none_or(|w| badness(&r) > badness(w)) {
            worst = Some(r);
        }
    }
    worst.expect("a route has at least one destination")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendError;

    fn ok(r: &[u8]) -> RouteReply {
        Ok(r.to_vec())
    }

    fn down() -> RouteReply {
        Err(BackendError::Down("x".into()))
    }

    fn run(f: ReplyFuture) -> RouteReply {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    fn calls(replies: Vec<RouteReply>) -> Vec<ReplyFuture> {
        replies
            .into_iter()
            .map(|r| Box::pin(std::future::ready(r)) as ReplyFuture)
            .collect()
    }

    #[test]
    fn the_worst_reply_wins() {
        let se: RouteReply = ok(b"SERVER_ERROR out of memory\r\n");
        assert!(badness(&ok(b"DELETED\r\n")) < badness(&ok(b"NOT_FOUND\r\n")));
        assert!(badness(&ok(b"NOT_FOUND\r\n")) < badness(&se));
        assert!(badness(&se) < badness(&down()));
    }

    #[test]
    fn a_delete_is_deleted_if_any_destination_deleted_and_failed_if_any_failed() {
        let nf = || ok(b"NOT_FOUND\r\n");
        let del = || ok(b"DELETED\r\n");
        let r = run(all_deleted(calls(vec![nf(), del(), nf()])));
        assert_eq!(r.unwrap(), b"DELETED\r\n");
        let r = run(all_deleted(calls(vec![nf(), nf()])));
        assert_eq!(r.unwrap(), b"NOT_FOUND\r\n");
        assert!(run(all_deleted(calls(vec![del(), down()]))).is_err());
        let r = run(all_deleted(calls(vec![del(), ok(b"SERVER_ERROR x\r\n")])));
        assert_eq!(r.unwrap(), b"SERVER_ERROR x\r\n");
        let r = run(all_deleted(calls(vec![ok(b"NF\r\n"), ok(b"HD\r\n")])));
        assert_eq!(r.unwrap(), b"HD\r\n");
    }

    #[test]
    fn writes_answer_by_the_policy() {
        let stored = || ok(b"STORED\r\n");
        let three = || calls(vec![down(), stored(), stored()]);
        assert_eq!(
            run(by_policy(three(), WritePolicy::Any)).unwrap(),
            b"STORED\r\n"
        );
        assert_eq!(
            run(by_policy(three(), WritePolicy::Majority)).unwrap(),
            b"STORED\r\n"
        );
        assert!(run(by_policy(three(), WritePolicy::All)).is_err());
        let one = calls(vec![down(), ok(b"NOT_STORED\r\n"), stored()]);
        assert!(run(by_policy(one, WritePolicy::Majority)).is_err());
        let none = calls(vec![ok(b"NOT_STORED\r\n"), ok(b"NOT_STORED\r\n")]);
        assert_eq!(
            run(by_policy(none, WritePolicy::Any)).unwrap(),
            b"NOT_STORED\r\n"
        );
    }
}

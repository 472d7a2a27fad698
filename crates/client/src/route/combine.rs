//! Answering one reply for several destinations (replicated writes, broadcasts).

use super::{Reply, ReplyFuture};

/// then a refusal (not found, not stored, exists), then success.
pub(super) fn badness(reply: &Reply) -> u8 {
    let Ok(r) = reply else {
        return 4;
    };
    let starts = |p: &[&[u8]]| p.iter().any(|p| r.starts_with(p));
    if starts(&[b"SERVER_ERROR", b"CLIENT_ERROR", b"ERROR"]) {
        3
    } else if starts(&[b"NOT_FOUND", b"NOT_STORED", b"EXISTS", b"NF", b"NS", b"EX"]) {
        2
    } else {
        1
    }
}

/// Waits for every call; answers the worst reply (the first of equally bad ones).
pub(super) fn all_sync(calls: Vec<ReplyFuture>) -> ReplyFuture {
    Box::pin(async move {
        let mut worst: Option<Reply> = None;
        for c in calls {
            let r = c.await;
            if worst.as_ref().is_none_or(|w| badness(&r) > badness(w)) {
                worst = Some(r);
            }
        }
        worst.expect("a route has at least one destination")
    })
}

/// A get through a warm-up route: the cold cluster's answer, or on a miss the warm
/// cluster's value `add`ed into the cold one (paper §4.3). A refused add (the key was
/// deleted with a hold-off since, or another fill won) answers a miss, so the client

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendError;

    #[test]
    fn the_worst_reply_wins() {
        let ok: Reply = Ok(b"DELETED\r\n".to_vec());
        let nf: Reply = Ok(b"NOT_FOUND\r\n".to_vec());
        let se: Reply = Ok(b"SERVER_ERROR out of memory\r\n".to_vec());
        let down: Reply = Err(BackendError::Down("x".into()));
        assert!(badness(&ok) < badness(&nf));
        assert!(badness(&nf) < badness(&se));
        assert!(badness(&se) < badness(&down));
    }
}

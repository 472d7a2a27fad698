//! A listener's `workers`: which of the router's workers serve its clients, and on which
//! lane (server connections) each client sends. Shared by pools (`config`) and routes
//! (`routes`).

/// The router workers (`memfleet router -t k`, numbered 0 to k-1) that serve a listener's
/// clients: all of them by default, or those of a `workers = [...]` list, so that a
/// listener's clients (a pool under a storm) cannot take the workers that another
/// listener's clients use. Each new client goes to the next of them in turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenerWorkers(u64);

impl ListenerWorkers {
    /// Every worker (the default).
    pub const ALL: ListenerWorkers = ListenerWorkers(0);
    /// Worker numbers a list may name: 0 to 63.
    pub const MAX: u64 = 64;

    /// The workers of a `workers = [...]` list: not empty, no number twice, each below
    /// [`ListenerWorkers::MAX`].
    pub fn of_list(list: &[u64]) -> Result<ListenerWorkers, String> {
        if list.is_empty() {
            return Err("workers = [] would serve no client: name at least one worker".into());
        }
        let mut bits = 0u64;
        for &w in list {
            if w >= Self::MAX {
                return Err(format!(
                    "workers: {w} is no worker number (0 to {})",
                    Self::MAX - 1
                ));
            }
            if bits & (1 << w) != 0 {
                return Err(format!("workers: {w} is named twice"));
            }
            bits |= 1 << w;
        }
        Ok(ListenerWorkers(bits))
    }

    /// The highest worker number named (`None`: every worker).
    pub fn highest(self) -> Option<usize> {
        (self.0 != 0).then(|| 63 - self.0.leading_zeros() as usize)
    }

    /// The worker (of `count`) that serves a listener's `nth` client, and the lane it
    /// sends on: a lane `≡ worker (mod count)`, so that its server connections run on the
    /// same worker (`memfleet_client::lanes`), one after another for that worker's
    /// clients. With every worker: worker `nth % count`, lane `nth`.
    pub fn place(self, nth: usize, count: usize) -> (usize, usize) {
        let count = count.max(1);
        let named = (0..count).filter(|w| self.serves(*w)).count();
        if named == 0 {
            // Every worker (or none of those named exists: the start refuses that).
            return (nth % count, nth);
        }
        let worker = (0..count)
            .filter(|w| self.serves(*w))
            .nth(nth % named)
            .expect("named workers");
        (worker, worker + count * (nth / named))
    }

    /// Whether worker `w` serves the listener.
    fn serves(self, w: usize) -> bool {
        self.0 == 0 || (w < 64 && self.0 & (1 << w) != 0)
    }

    /// As one word (for an atomic a reload swaps); [`ListenerWorkers::from_bits`] undoes it.
    pub fn to_bits(self) -> u64 {
        self.0
    }

    /// What [`ListenerWorkers::to_bits`] gave.
    pub fn from_bits(bits: u64) -> ListenerWorkers {
        ListenerWorkers(bits)
    }

    /// The worker numbers named, as the file wrote them (sorted); empty: every worker.
    pub fn list(self) -> Vec<usize> {
        (0..64).filter(|w| self.0 & (1 << w) != 0).collect()
    }
}

/// A pool's or route's `workers` list, checked (it needs a listener to serve).
pub(crate) fn listener_workers(
    list: Option<&[u64]>,
    listens: bool,
) -> Result<ListenerWorkers, String> {
    match list {
        None => Ok(ListenerWorkers::ALL),
        Some(_) if !listens => Err(
            "workers picks the router workers of the listener's clients: it needs listen".into(),
        ),
        Some(list) => ListenerWorkers::of_list(list),
    }
}

//! Which items the replies of the current batch still hold, so that `incr` and `decr` write
//! their result back as memcached 1.6.45 does.
//!
//! memcached keeps a reference to every item a read (`get`, `gets`, `gat`, `gats`, `mg`) put
//! in a reply until that reply is sent. An `incr` or `decr` on an item nobody else holds
//! rewrites it in place, space padding a shorter number to the old length (`decr` of `100`
//! by 1 reads back `99 `); on an item a reply still holds it stores a new item as long as
//! the digits (`99`). Replies go out when a batch of requests is done, at `mn`, and after
//! memcached's per-event request limit, so `get n` and `decr n 1` pipelined in one write
//! give `99`, and sent one after the other give `99 `.
//!
//! Not here: the rewrite itself (`memfleet_storage::Handle::delta_new_item`). The table is
//! small and fixed: reads past [`CAPACITY`] in one batch are not remembered, and their items
//! are padded as if nobody held them.

use memfleet_storage::{Handle, ItemRef};

/// Reads remembered per batch.
const CAPACITY: usize = 16;

/// memcached's `reqs_per_event` (20): after the first request of a read and 20 more, it sends
/// the replies so far (releasing their items), then again after every 20.
const REQUESTS_PER_EVENT: u32 = 20;

/// The items this batch's unsent replies hold, each as its `Pin`.
#[derive(Default)]
pub struct ReadPins {
    held: [Pin; CAPACITY],
    len: usize,
    requests: u32,
}

/// One stored copy of a value: where it lies in the heap and its CAS unique, which changes
/// with every write (a touch keeps it, as memcached's touch keeps the item).
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct Pin {
    location: u64,
    cas: u64,
}

impl Pin {
    /// The pin of the item a read found.
    pub fn of(item: &ItemRef<'_>) -> Pin {
        Pin {
            location: item.location(),
            cas: item.cas(),
        }
    }
}

impl ReadPins {
    /// A read put this item in a reply.
    pub fn hold(&mut self, pin: Pin) {
        if self.len < CAPACITY {
            self.held[self.len] = pin;
            self.len += 1;
        }
    }

    /// Whether a reply of this batch holds the item `key` has now in `handle`.
    pub fn holds(&self, handle: &Handle, key: &[u8]) -> bool {
        if self.len == 0 {
            return false;
        }
        let Some(item) = handle.peek_value(key) else {
            return false;
        };
        self.held[..self.len].contains(&Pin::of(&item))
    }

    /// The replies so far were sent (`mn` flushes them in memcached).
    pub fn release(&mut self) {
        self.len = 0;
    }

    /// Counts a request about to run, releasing the items where memcached's per-event limit
    /// would have sent the replies before it.
    pub fn next_request(&mut self) {
        self.requests += 1;
        if self.requests > REQUESTS_PER_EVENT + 1
            && (self.requests - REQUESTS_PER_EVENT - 2).is_multiple_of(REQUESTS_PER_EVENT)
        {
            self.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_per_event_limit_releases_after_21_then_every_20() {
        let mut p = ReadPins::default();
        let mut released_before = Vec::new();
        for request in 1..=62 {
            p.held[0] = Pin {
                location: 1,
                cas: 1,
            };
            p.len = 1;
            p.next_request();
            if p.len == 0 {
                released_before.push(request);
            }
        }
        assert_eq!(released_before, [22, 42, 62]);
    }

    #[test]
    fn the_table_is_bounded() {
        let mut p = ReadPins::default();
        for cas in 0..100u64 {
            p.hold(Pin { location: 7, cas });
        }
        assert_eq!(p.len, CAPACITY);
    }
}

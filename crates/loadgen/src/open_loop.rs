//! Open-loop load (`memfleet bench --rate OPS`): requests are sent on a
//! schedule that does not depend on replies, and each latency is measured from
//! the request's intended send time, so a slow server is charged for the
//! requests it delayed as well (no coordinated omission).
//!
//! Each connection's requests form a Poisson process of rate `OPS / conns`
//! (exponential gaps, drawn from the connection's own seeded RNG). Three kinds
//! of task share one thread:
//! - the pacer turns due times into requests on the connections' due queues.
//!   tokio's timers tick in milliseconds, far coarser than the gaps at tens of
//!   thousands of requests per second, so within `SPIN_WINDOW` of the next
//!   due time it yields to the runtime instead of sleeping (each yield polls
//!   the sockets). This keeps send times within a few µs of the schedule at
//!   the price of a busy load-generator core: the client CPU column of an
//!   open-loop run is the core, not the cost per request;
//! - one sender per connection writes whatever is due, up to the pipeline
//!   depth per write, without waiting for replies (a connection that is
//!   behind pipelines, up to `MAX_IN_FLIGHT` requests);
//! - one receiver per connection matches replies to its in-flight requests in
//!   order, checks each like the closed loop does and records its latency from
//!   the intended send time.
//!
//! The senders also record how late each request was written ("send lag"): a
//! large lag means the load generator, not the server, fell behind (a busy
//! machine, or a rate beyond one thread), and the latencies include it.
//!
//! Not here: reply parsing (`reply`, `conn`), which requests (`workload`).

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::rc::Rc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::RngExt;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::conn::{conn_error, Conn, ConnError, Phase, ReplyBuffer, RunState};
use super::workload::{conn_rng, Workload, WorkloadOp};

/// How close to the next due time the pacer stops sleeping and starts yielding: more
/// than tokio's 1 ms timer resolution.
const SPIN_WINDOW: Duration = Duration::from_micros(1500);

/// Most requests the pacer queues before it lets the other tasks run, so that a rate
/// beyond what one thread can send still makes progress (and still stops).
const MAX_DUE_IN_A_ROW: u32 = 256;

/// Most requests a connection has in flight: past it the sender waits for replies. The
/// requests it holds back still count their latency from their intended send time, so
/// this bounds memory and the drain at the end of a run, not what is measured.
const MAX_IN_FLIGHT: usize = 4096;

/// Mixed into the seed of the schedule's RNG so that the gaps are not the draws of the
/// requests themselves.
const SCHEDULE_SALT: u64 = 0x5EED_0F0B_E4A7;

/// A request and when it should have been sent.
type Scheduled = (WorkloadOp, Instant);

/// One connection's queues, shared by the pacer, its sender and its receiver.
#[derive(Default)]
struct Lane {
    /// Due, not written yet.
    due: RefCell<VecDeque<Scheduled>>,
    /// Written, reply not read yet (in order).
    in_flight: RefCell<VecDeque<Scheduled>>,
    /// Something was added to `due`, or the run stopped.
    due_added: Notify,
    /// Something was added to `in_flight`, or the sender finished.
    in_flight_added: Notify,
    /// Replies were taken off `in_flight`.
    replied: Notify,
    /// The sender has finished: no more requests will be in flight.
    sender_done: Cell<bool>,
    /// The connection failed: stop scheduling and sending on it.
    broken: Cell<bool>,
}

impl Lane {
    fn stop(&self) {
        self.due_added.notify_one();
        self.in_flight_added.notify_one();
    }
}

/// Starts the pacer and every connection's sender and receiver for a total of `rate`
/// requests per second; they run until `sh.phase` is [`Phase::Stop`] and the last
/// replies are in.
pub(super) fn spawn(
    conns: Vec<Conn>,
    w: &Rc<Workload>,
    rate: f64,
    depth: usize,
    seed: u64,
    sh: &Rc<RunState>,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::with_capacity(2 * conns.len() + 1);
    let mut lanes = Vec::with_capacity(conns.len());
    for conn in conns {
        let lane = Rc::new(Lane::default());
        let (read, write) = conn.into_stream().into_split();
        sh.running.set(sh.running.get() + 2);
        tasks.push(tokio::task::spawn_local(send(
            write,
            lane.clone(),
            w.clone(),
            depth,
            sh.clone(),
        )));
        tasks.push(tokio::task::spawn_local(receive(
            read,
            lane.clone(),
            w.clone(),
            sh.clone(),
        )));
        lanes.push(lane);
    }
    sh.running.set(sh.running.get() + 1);
    tasks.push(tokio::task::spawn_local(pace(
        lanes,
        w.clone(),
        rate,
        seed,
        sh.clone(),
    )));
    tasks
}

/// An exponential gap with mean `1 / rate` seconds.
fn gap(rng: &mut SmallRng, rate: f64) -> Duration {
    let u: f64 = rng.random();
    Duration::from_secs_f64(-(1.0 - u).ln() / rate)
}

/// Puts each connection's requests on its due queue at their scheduled times.
async fn pace(lanes: Vec<Rc<Lane>>, w: Rc<Workload>, rate: f64, seed: u64, sh: Rc<RunState>) {
    let per_conn = rate / lanes.len() as f64;
    let mut request_rngs: Vec<SmallRng> = (0..lanes.len()).map(|id| conn_rng(seed, id)).collect();
    let mut gap_rngs: Vec<SmallRng> = (0..lanes.len())
        .map(|id| conn_rng(seed ^ SCHEDULE_SALT, id))
        .collect();
    let start = Instant::now();
    let mut next: BinaryHeap<Reverse<(Instant, usize)>> = gap_rngs
        .iter_mut()
        .enumerate()
        .map(|(id, rng)| Reverse((start + gap(rng, per_conn), id)))
        .collect();
    let mut in_a_row = 0;
    while sh.phase.get() != Phase::Stop {
        let Some(&Reverse((due, id))) = next.peek() else {
            break;
        };
        let now = Instant::now();
        if due <= now && in_a_row < MAX_DUE_IN_A_ROW {
            in_a_row += 1;
            next.pop();
            let lane = &lanes[id];
            if !lane.broken.get() {
                let op = w.op(&mut request_rngs[id]);
                lane.due.borrow_mut().push_back((op, due));
                lane.due_added.notify_one();
                next.push(Reverse((due + gap(&mut gap_rngs[id], per_conn), id)));
            }
        } else if due <= now {
            // Behind (a rate beyond this thread): let the senders and receivers run.
            in_a_row = 0;
            tokio::task::yield_now().await;
        } else if due - now > SPIN_WINDOW {
            in_a_row = 0;
            let wake = due - SPIN_WINDOW;
            tokio::time::sleep_until(tokio::time::Instant::from_std(wake)).await;
        } else {
            in_a_row = 0;
            tokio::task::yield_now().await;
        }
    }
    for lane in &lanes {
        lane.stop();
    }
    sh.running.set(sh.running.get() - 1);
}

/// Writes the connection's due requests, up to `depth` per write, until the run stops.
async fn send(
    mut write: OwnedWriteHalf,
    lane: Rc<Lane>,
    w: Rc<Workload>,
    depth: usize,
    sh: Rc<RunState>,
) {
    let mut out = Vec::with_capacity(4096);
    while sh.phase.get() != Phase::Stop && !lane.broken.get() {
        if lane.due.borrow().is_empty() {
            lane.due_added.notified().await;
            continue;
        }
        if lane.in_flight.borrow().len() >= MAX_IN_FLIGHT {
            lane.replied.notified().await;
            continue;
        }
        out.clear();
        let written;
        {
            let mut due = lane.due.borrow_mut();
            let mut in_flight = lane.in_flight.borrow_mut();
            let batch = depth.min(due.len()).min(MAX_IN_FLIGHT - in_flight.len());
            written = batch;
            for scheduled in due.drain(..batch) {
                w.encode(scheduled.0, &mut out);
                in_flight.push_back(scheduled);
            }
        }
        lane.in_flight_added.notify_one();
        if sh.phase.get() == Phase::Measure {
            let now = Instant::now();
            let mut stats = sh.stats.borrow_mut();
            for &(_, intended) in lane.in_flight.borrow().iter().rev().take(written) {
                let lag = now.saturating_duration_since(intended).as_nanos();
                stats
                    .send_lag_ns
                    .saturating_record(lag.min(u128::from(u64::MAX)) as u64);
            }
        }
        if let Err(e) = write.write_all(&out).await {
            conn_error(&mut sh.stats.borrow_mut(), ConnError::Io(e));
            lane.broken.set(true);
        }
    }
    lane.sender_done.set(true);
    lane.in_flight_added.notify_one();
    sh.running.set(sh.running.get() - 1);
}

/// Reads and checks the replies of the connection's in-flight requests until the
/// sender is done and every reply is in.
async fn receive(mut read: OwnedReadHalf, lane: Rc<Lane>, w: Rc<Workload>, sh: Rc<RunState>) {
    let mut replies = ReplyBuffer::default();
    if let Err(e) = receive_all(&mut read, &mut replies, &lane, &w, &sh).await {
        conn_error(&mut sh.stats.borrow_mut(), e);
        lane.broken.set(true);
        lane.due_added.notify_one();
        lane.replied.notify_one();
    }
    sh.running.set(sh.running.get() - 1);
}

async fn receive_all(
    read: &mut OwnedReadHalf,
    replies: &mut ReplyBuffer,
    lane: &Lane,
    w: &Workload,
    sh: &RunState,
) -> Result<(), ConnError> {
    let mut read_at = Instant::now();
    loop {
        loop {
            let Some(&(op, intended)) = lane.in_flight.borrow().front() else {
                break;
            };
            let Some(reply) = replies.next_reply(op, w)? else {
                break;
            };
            lane.in_flight.borrow_mut().pop_front();
            let measured = sh.phase.get() == Phase::Measure;
            sh.stats.borrow_mut().reply(
                op,
                reply,
                read_at.saturating_duration_since(intended),
                measured,
            );
        }
        lane.replied.notify_one();
        if lane.in_flight.borrow().is_empty() {
            replies.expect_empty()?;
            if lane.sender_done.get() || lane.broken.get() {
                return Ok(());
            }
            lane.in_flight_added.notified().await;
            continue;
        }
        read_at = replies.fill(read).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn gaps_average_one_over_the_rate() {
        let mut rng = SmallRng::seed_from_u64(5);
        let n = 100_000;
        let total: Duration = (0..n).map(|_| gap(&mut rng, 1000.0)).sum();
        let mean = total.as_secs_f64() / f64::from(n);
        assert!((mean - 0.001).abs() < 0.00003, "{mean}");
    }
}

//! The connections open on a server, the cap on them, and how one asked to close is
//! seen waiting on its client.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The connections open on a server, at most `max`.
///
/// At the cap, a connection just accepted waits while the server asks another to close:
/// one answering no request (for [`SETTLED`] at least) if there is one, the one whose
/// last request began longest ago (a connection that never sent one counts from when it was accepted), among the
/// next [`LOOKED_AT`] not yet asked from where the last search stopped, so that finding
/// one costs the same however many are open. Asked, a connection waiting on its client
/// closes at once, and so does a stream's (it ends between two events, see
/// [`Interruptible`](super::Interruptible)); one in a request (a long call) closes once it
/// is answered, and if none has closed [`ASK_AGAIN`] later the server asks another.
pub struct Connections {
    max: usize,
    epoch: Instant,
    slots: Mutex<Slots>,
    ended: Notify,
    closed_at_cap: AtomicU64,
}

/// How many open connections a search for the one to close looks at.
const LOOKED_AT: usize = 32;

/// How long a connection waiting for room waits for the one asked to close before
/// another is asked: the one asked may be busy for minutes (the oldest request is often
/// a long call or an SSE stream) while others sit idle.
pub(super) const ASK_AGAIN: Duration = Duration::from_millis(50);

/// How long after its last request began (or it was let in) a connection answering none
/// counts as idle, to be asked to close before busy ones: one just let in has its first
/// request on the way, and asked before hyper reads it, it is closed unanswered.
pub(super) const SETTLED: Duration = Duration::from_secs(1);

/// How often a connection asked to close looks whether it waits on its client.
const LOOK_AGAIN: Duration = Duration::from_millis(100);

/// How long the writes of a connection asked to close may be blocked (its client reads
/// nothing) before it is dropped, its answer unfinished.
pub(super) const STALLED_WRITES: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Slots {
    open: Vec<Option<Arc<Open>>>,
    free: Vec<usize>,
    cursor: usize,
}

impl Slots {
    /// How many are taken.
    fn len(&self) -> usize {
        self.open.len() - self.free.len()
    }
}

/// One open connection. Its times are in ms since its server's epoch, so that they compare
/// across connections.
pub(super) struct Open {
    epoch: Instant,
    /// When its last request began (or it was accepted).
    pub(super) active_ms: AtomicU64,
    /// Since when its writes have been blocked, plus one; 0 if not.
    pub(super) blocked_ms: AtomicU64,
    pub(super) asked: AtomicBool,
    /// Cancelled when asked to close.
    pub(super) close: CancellationToken,
    /// Requests being handled or answered.
    pub(super) busy: AtomicUsize,
    /// Answers waiting for the connection to take what they have (see [`Answering`]).
    pub(super) answers_waiting: AtomicUsize,
    /// When an answer was last taken while others waited (or the first began to wait).
    pub(super) answers_taken_ms: AtomicU64,
}

impl Open {
    /// Now, in ms since the epoch.
    pub(super) fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub(super) fn began_request(&self) {
        self.active_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Returns once, asked to close, it is seen waiting on its client: not answering a
    /// request (hyper closes an idle one by itself, so one left is part way through a
    /// request's head) nor writing, or with its writes blocked, or its answers waiting
    /// and none taken, for [`STALLED_WRITES`].
    pub(super) async fn waiting_on_client(&self) {
        let stalled_since = |since: u64| {
            Duration::from_millis(self.now_ms().saturating_sub(since)) >= STALLED_WRITES
        };
        loop {
            tokio::time::sleep(LOOK_AGAIN).await;
            if self.answers_waiting.load(Ordering::Relaxed) > 0
                && stalled_since(self.answers_taken_ms.load(Ordering::Relaxed))
            {
                return;
            }
            match self.blocked_ms.load(Ordering::Relaxed) {
                0 if self.busy.load(Ordering::Relaxed) == 0 => return,
                0 => {}
                since if stalled_since(since - 1) => return,
                _ => {}
            }
        }
    }
}

impl Connections {
    /// At most `max` (at least one) open at once.
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            epoch: Instant::now(),
            slots: Mutex::default(),
            ended: Notify::new(),
            closed_at_cap: AtomicU64::new(0),
        })
    }

    /// How many are open now.
    pub fn open(&self) -> usize {
        self.slots().len()
    }

    /// How many the server has asked to close to make room for another, so far.
    pub fn closed_at_cap(&self) -> u64 {
        self.closed_at_cap.load(Ordering::Relaxed)
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Returns once fewer than `max` are open, asking one to close meanwhile, and another
    /// each [`ASK_AGAIN`] none closes.
    pub(super) async fn room(&self) {
        self.until(|| !self.ask_one_to_close(), Some(ASK_AGAIN))
            .await;
    }

    /// Returns once none is open.
    pub(super) async fn drained(&self) {
        self.until(|| self.open() == 0, None).await;
    }

    /// Returns once `done`, asked again each time a connection ends, and after `every`
    /// without one (and first at once).
    async fn until(&self, mut done: impl FnMut() -> bool, every: Option<Duration>) {
        loop {
            let ended = self.ended.notified();
            let mut ended = std::pin::pin!(ended);
            // Registered before asking: an end in between still wakes it.
            ended.as_mut().enable();
            if done() {
                return;
            }
            match every {
                Some(every) => _ = tokio::time::timeout(every, ended).await,
                None => ended.await,
            }
        }
    }

    /// At the cap, asks the connection idle longest (of those looked at, and not asked
    /// before; one answering no request first) to close; whether the cap was reached.
    pub(super) fn ask_one_to_close(&self) -> bool {
        let mut slots = self.slots();
        if slots.len() < self.max {
            return false;
        }
        let n = slots.open.len();
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let settled = u64::try_from(SETTLED.as_millis()).unwrap_or(u64::MAX);
        // Answering nothing, and not just let in or just answered, first: it closes at
        // once. Then the one whose last request began longest ago.
        let rank = |o: &Open| {
            let active = o.active_ms.load(Ordering::Relaxed);
            let idle = o.busy.load(Ordering::Relaxed) == 0 && now.saturating_sub(active) >= settled;
            (!idle, active)
        };
        let (mut idlest, mut looked_at, mut i) = (None::<&Arc<Open>>, 0, 0);
        while looked_at < LOOKED_AT && i < n {
            if let Some(open) = &slots.open[(slots.cursor + i) % n]
                && !open.asked.load(Ordering::Relaxed)
            {
                looked_at += 1;
                if idlest.is_none_or(|o| rank(open) < rank(o)) {
                    idlest = Some(open);
                }
            }
            i += 1;
        }
        if let Some(open) = idlest {
            open.asked.store(true, Ordering::Relaxed);
            open.close.cancel();
            let asked = self.closed_at_cap.fetch_add(1, Ordering::Relaxed) + 1;
            if asked.is_power_of_two() {
                tracing::warn!(
                    max = self.max,
                    asked,
                    "at the connection cap (http.max_connections): closing the connections idle longest"
                );
            }
        }
        slots.cursor = (slots.cursor + i) % n;
        true
    }

    pub(super) fn admit(self: &Arc<Self>) -> (Admitted, Arc<Open>) {
        let open = Arc::new(Open {
            epoch: self.epoch,
            active_ms: AtomicU64::new(0),
            blocked_ms: AtomicU64::new(0),
            asked: AtomicBool::new(false),
            close: CancellationToken::new(),
            busy: AtomicUsize::new(0),
            answers_waiting: AtomicUsize::new(0),
            answers_taken_ms: AtomicU64::new(0),
        });
        // A connection that never sends a request counts from when it was accepted.
        open.began_request();
        let mut slots = self.slots();
        let slot = match slots.free.pop() {
            Some(slot) => {
                slots.open[slot] = Some(open.clone());
                slot
            }
            None => {
                slots.open.push(Some(open.clone()));
                slots.open.len() - 1
            }
        };
        drop(slots);
        let admitted = Admitted {
            connections: self.clone(),
            slot,
        };
        (admitted, open)
    }
}

/// An open connection's place among [`Connections`], given back when dropped.
pub(super) struct Admitted {
    connections: Arc<Connections>,
    slot: usize,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut slots = self.connections.slots();
        slots.open[self.slot] = None;
        slots.free.push(self.slot);
        drop(slots);
        self.connections.ended.notify_waiters();
    }
}

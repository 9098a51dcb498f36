//! A budget of so many a second, for what others send the gateway at their own pace: an
//! upstream's notifications, and what a call relays to its client.

use std::time::Duration;

use tokio::time::Instant;

const SECOND: Duration = Duration::from_secs(1);

/// At most `limit` in each fixed second, the first second starting at the first count.
#[derive(Debug)]
pub(crate) struct PerSecond {
    limit: u32,
    /// When the current second started; none before the first count, so that making a
    /// budget (one per MCP call) reads no clock.
    started: Option<Instant>,
    passed: u32,
}

impl PerSecond {
    pub(crate) fn new(limit: u32) -> Self {
        Self {
            limit,
            started: None,
            passed: 0,
        }
    }

    /// Counts one more if this second's budget allows it: whether it may pass.
    pub(crate) fn admit(&mut self, now: Instant) -> bool {
        self.roll(now);
        let admitted = self.passed < self.limit;
        if admitted {
            self.passed += 1;
        }
        admitted
    }

    /// When this second's budget is spent: the instant the next one starts.
    pub(crate) fn spent_until(&mut self, now: Instant) -> Option<Instant> {
        let started = self.roll(now);
        (self.passed >= self.limit).then_some(started + SECOND)
    }

    /// Starts a new second at `now` once the current one is over (or none has started);
    /// when the current one started.
    fn roll(&mut self, now: Instant) -> Instant {
        match self.started {
            Some(started) if now.saturating_duration_since(started) < SECOND => started,
            _ => {
                self.passed = 0;
                *self.started.insert(now)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_admits_its_limit_then_nothing_until_the_next_one() {
        let start = Instant::now();
        let mut pace = PerSecond::new(3);
        let at = |ms| start + Duration::from_millis(ms);
        assert!(pace.admit(at(0)) && pace.admit(at(10)));
        assert_eq!(pace.spent_until(at(20)), None);
        assert!(pace.admit(at(20)));
        assert!(!pace.admit(at(30)), "a fourth in the same second");
        let until = pace.spent_until(at(500)).expect("spent");
        assert!(until >= at(1000) && until < at(1001), "{until:?}");
        assert!(!pace.admit(until - Duration::from_millis(1)));
        // The next second starts when it is first used, not on a fixed grid.
        assert!(pace.admit(at(1700)));
        assert_eq!(pace.spent_until(at(1700)), None);
        assert!(pace.admit(at(1800)) && pace.admit(at(2600)));
        assert!(!pace.admit(at(2650)));
        assert!(pace.admit(at(2700)), "1700 + 1 s: a new second");
    }
}

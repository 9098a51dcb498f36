//! The one backoff policy of every retry and reconnect loop (LLM provider calls, an
//! agent's retried tool calls, upstream reconnects, waiting for the store at start):
//! exponential from `first`, doubling up to `max`, and each wait drawn between half and
//! all of its step ("equal jitter"), so many gateways or runs do not retry in step and
//! none retries at once.

use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The first retry's step.
    pub first: Duration,
    /// The largest step.
    pub max: Duration,
}

impl Backoff {
    pub const fn new(first: Duration, max: Duration) -> Self {
        Self { first, max }
    }

    /// The step of retry number `attempt` (1-based), before jitter: `first · 2^(attempt−1)`,
    /// at most `max`.
    pub fn step(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        self.first.saturating_mul(1 << doublings).min(self.max)
    }

    /// How long to wait before retry number `attempt` (1-based): between half and all of
    /// its step.
    pub fn delay(&self, attempt: u32) -> Duration {
        self.step(attempt).mul_f64(0.5 + fastrand::f64() / 2.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_double_up_to_the_cap_and_waits_stay_within_half_and_all_of_them() {
        let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let steps: Vec<u64> = (1..=7)
            .map(|a| backoff.step(a).as_millis() as u64)
            .collect();
        assert_eq!(steps, [100, 200, 400, 800, 1600, 2000, 2000]);
        assert_eq!(backoff.step(0), Duration::from_millis(100));
        assert_eq!(backoff.step(u32::MAX), Duration::from_secs(2));
        for attempt in 1..=10 {
            let step = backoff.step(attempt);
            for _ in 0..50 {
                let wait = backoff.delay(attempt);
                assert!(
                    wait >= step / 2 && wait <= step,
                    "{attempt}: {wait:?} of {step:?}"
                );
            }
        }
    }
}

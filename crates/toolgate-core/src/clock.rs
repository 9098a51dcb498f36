//! The wall clock orchestration reads (leases, expiries, retention), as a seam: the
//! gateway runs on [`SystemClock`]; a test moves a [`ManualClock`] past a lease or an
//! expiry at once instead of sleeping through it.

use std::sync::Mutex;

use chrono::{DateTime, Utc};

/// What time it is.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> DateTime<Utc>;
}

/// The system's clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that stands still until it is moved.
#[derive(Debug)]
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    pub fn at(now: DateTime<Utc>) -> Self {
        Self(Mutex::new(now))
    }

    /// Moves the clock on by `by`.
    pub fn advance(&self, by: std::time::Duration) {
        let mut now = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *now += chrono::Duration::from_std(by).unwrap_or(chrono::Duration::MAX);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let start = Utc::now();
        let clock = ManualClock::at(start);
        assert_eq!(clock.now(), start);
        clock.advance(std::time::Duration::from_secs(31));
        assert_eq!(clock.now(), start + chrono::Duration::seconds(31));
        assert!(SystemClock.now() >= start);
    }
}

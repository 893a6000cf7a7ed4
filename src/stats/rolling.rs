//! Rolling windows made of slots: a slot older than the window is reset when its turn comes.

use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::time::Instant;

use super::Percentiles;

#[derive(Debug)]
struct Clock {
    origin: Instant,
    /// A slot's width in nanoseconds (at least a millisecond).
    width_ns: u64,
    slots: usize,
}

impl Clock {
    fn new(window: Duration, slots: usize, now: Instant) -> Self {
        Clock {
            origin: now,
            width_ns: nanos((window / slots as u32).max(Duration::from_millis(1))),
            slots,
        }
    }

    /// A `u64` division: a `u128` one is a call of ~40 instructions, made each time a request
    /// records in a window.
    fn epoch(&self, now: Instant) -> u64 {
        nanos(now.saturating_duration_since(self.origin)) / self.width_ns
    }

    /// Is a slot last written at `epoch` still inside the window at `now`?
    fn live(&self, epoch: u64, now: Instant) -> bool {
        self.epoch(now).saturating_sub(epoch) < self.slots as u64
    }
}

/// `d` in nanoseconds; past `u64::MAX` (584 years), `u64::MAX`.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Success / total counts over a rolling window.
#[derive(Debug)]
pub struct RollingCounts {
    clock: Clock,
    slots: Vec<(u64, u64, u64)>, // (epoch, ok, total)
}

impl RollingCounts {
    /// An empty window of `slots` slots.
    pub fn new(window: Duration, slots: usize, now: Instant) -> Self {
        RollingCounts {
            clock: Clock::new(window, slots, now),
            slots: vec![(0, 0, 0); slots],
        }
    }

    /// Count one event.
    pub fn add(&mut self, now: Instant, ok: bool) {
        let epoch = self.clock.epoch(now);
        let slot = &mut self.slots[(epoch % self.clock.slots as u64) as usize];
        if slot.0 != epoch {
            *slot = (epoch, 0, 0);
        }
        slot.1 += u64::from(ok);
        slot.2 += 1;
    }

    /// (ok, total) in the window.
    pub fn counts(&self, now: Instant) -> (u64, u64) {
        self.slots
            .iter()
            .filter(|s| self.clock.live(s.0, now))
            .fold((0, 0), |(ok, n), s| (ok + s.1, n + s.2))
    }
}

/// Latencies (recorded in microseconds) over a rolling window.
///
/// A slot's histogram is allocated on the slot's first record, and the merged one on the first
/// read that has something to merge: each is 26 KiB (1 µs to an hour at 2 significant digits),
/// and every target keeps two windows of six slots whether it is ever used or not. Once
/// allocated, a histogram is reset and reused, never freed, so the request path allocates at
/// most once per slot over the process's life.
#[derive(Debug)]
pub struct RollingHistogram {
    clock: Clock,
    slots: Vec<(u64, Option<Histogram<u64>>)>,
    merged: Option<Histogram<u64>>,
}

/// The longest latency recorded (an hour), in microseconds.
pub const MAX_MICROS: u64 = 3_600_000_000;

#[expect(
    clippy::expect_used,
    reason = "constant bounds that hdrhistogram accepts"
)]
pub fn histogram() -> Histogram<u64> {
    // 1 µs to an hour at 2 significant digits: 3,328 counters, 26 KiB each.
    Histogram::new_with_bounds(1, MAX_MICROS, 2).expect("valid histogram bounds")
}

impl RollingHistogram {
    /// An empty window of `slots` slots.
    pub fn new(window: Duration, slots: usize, now: Instant) -> Self {
        RollingHistogram {
            clock: Clock::new(window, slots, now),
            slots: (0..slots).map(|_| (0, None)).collect(),
            merged: None,
        }
    }

    /// Record one latency.
    pub fn record(&mut self, now: Instant, value: Duration) {
        let epoch = self.clock.epoch(now);
        let slot = &mut self.slots[(epoch % self.clock.slots as u64) as usize];
        if slot.0 != epoch {
            slot.0 = epoch;
            if let Some(h) = &mut slot.1 {
                h.reset();
            }
        }
        slot.1
            .get_or_insert_with(histogram)
            .saturating_record((value.as_micros() as u64).clamp(1, MAX_MICROS));
    }

    /// The window's slots merged, or `None` when none has a sample (an empty merge).
    fn merge(&mut self, now: Instant) -> Option<&Histogram<u64>> {
        let clock = &self.clock;
        let mut live = self
            .slots
            .iter()
            .filter(|(epoch, _)| clock.live(*epoch, now))
            .filter_map(|(_, h)| h.as_ref().filter(|h| !h.is_empty()))
            .peekable();
        live.peek()?;
        let merged = self.merged.get_or_insert_with(histogram);
        merged.reset();
        for h in live {
            let _ = merged.add(h);
        }
        Some(merged)
    }

    /// The `q`-th percentile (0–100), with at least `min_samples` in the window.
    pub fn percentile(&mut self, now: Instant, q: f64, min_samples: u64) -> Option<Duration> {
        let h = self.merge(now)?;
        (h.len() >= min_samples.max(1)).then(|| Duration::from_micros(h.value_at_percentile(q)))
    }

    /// p50/p95/p99 in milliseconds, if any samples.
    pub fn percentiles(&mut self, now: Instant) -> Option<Percentiles> {
        let h = self.merge(now)?;
        let ms = |q: f64| h.value_at_percentile(q) as f64 / 1000.0;
        (!h.is_empty()).then(|| Percentiles {
            p50: ms(50.0),
            p95: ms(95.0),
            p99: ms(99.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_roll_out_of_the_window() {
        let t0 = Instant::now();
        let mut c = RollingCounts::new(Duration::from_secs(60), 6, t0);
        c.add(t0, true);
        c.add(t0 + Duration::from_secs(30), false);
        assert_eq!(c.counts(t0 + Duration::from_secs(31)), (1, 2));
        assert_eq!(c.counts(t0 + Duration::from_secs(65)), (0, 1));
        assert_eq!(c.counts(t0 + Duration::from_secs(200)), (0, 0));
    }

    #[test]
    fn an_epoch_is_a_whole_number_of_slot_widths_since_the_origin() {
        let t0 = Instant::now();
        let clock = Clock::new(Duration::from_secs(60), 6, t0);
        let width = Duration::from_secs(10);
        assert_eq!(clock.epoch(t0), 0);
        assert_eq!(clock.epoch(t0 + width - Duration::from_nanos(1)), 0);
        assert_eq!(clock.epoch(t0 + width), 1);
        assert_eq!(clock.epoch(t0 + width * 7 + Duration::from_millis(3)), 7);
        // Before the origin (a caller's older reading): the first slot, not a wrap.
        assert_eq!(clock.epoch(t0.checked_sub(width).unwrap_or(t0)), 0);
        // Slots narrower than a millisecond are a millisecond wide.
        let fine = Clock::new(Duration::from_micros(600), 6, t0);
        assert_eq!(fine.epoch(t0 + Duration::from_micros(999)), 0);
        assert_eq!(fine.epoch(t0 + Duration::from_millis(1)), 1);
    }

    #[test]
    fn percentiles_over_the_window() {
        let t0 = Instant::now();
        let mut h = RollingHistogram::new(Duration::from_secs(60), 6, t0);
        for ms in 1..=100u64 {
            h.record(t0, Duration::from_millis(ms));
        }
        let p = h.percentiles(t0).unwrap();
        assert!(
            (p.p50 - 50.0).abs() < 1.0 && (p.p99 - 99.0).abs() < 1.5,
            "{p:?}"
        );
        assert_eq!(h.percentile(t0, 95.0, 101), None, "not enough samples");
        let p95 = h.percentile(t0, 95.0, 100).unwrap();
        assert!((94..=96).contains(&p95.as_millis()), "{p95:?}");
        assert!(
            h.percentiles(t0 + Duration::from_secs(61)).is_none(),
            "rolled out"
        );
    }

    #[test]
    fn histograms_are_allocated_on_first_use() {
        let t0 = Instant::now();
        let mut h = RollingHistogram::new(Duration::from_secs(60), 6, t0);
        assert!(h.percentiles(t0).is_none());
        assert_eq!(h.percentile(t0, 50.0, 1), None);
        assert!(h.slots.iter().all(|s| s.1.is_none()) && h.merged.is_none());
        h.record(t0, Duration::from_millis(5));
        assert_eq!(h.slots.iter().filter(|s| s.1.is_some()).count(), 1);
        assert!(
            h.merged.is_none(),
            "merged on the first read, not on a record"
        );
        assert!(h.percentiles(t0).is_some());
        assert!(h.merged.is_some());
        // The same slot a window later: reset and reused, not reallocated beside the old one.
        let later = t0 + Duration::from_secs(60);
        h.record(later, Duration::from_millis(7));
        assert_eq!(h.slots.iter().filter(|s| s.1.is_some()).count(), 1);
        let p = h.percentiles(later).unwrap();
        assert!(
            (p.p50 - 7.0).abs() < 0.1 && (p.p99 - 7.0).abs() < 0.1,
            "{p:?}"
        );
    }
}

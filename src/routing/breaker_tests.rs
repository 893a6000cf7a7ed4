//! The breaker's behaviour on virtual time (no runtime: instants are computed, never waited).

use std::num::NonZeroU32;

use super::*;

impl Breaker {
    /// [`Breaker::record`] of an attempt that took no time: it started at `now`.
    fn record_at(&mut self, now: Instant, failed: bool) -> Option<Transition> {
        self.record(now, now, failed)
    }
}

fn policy() -> BreakerPolicy {
    BreakerPolicy {
        failure_rate: 0.40,
        window: Duration::from_secs(60),
        min_requests: 20,
        consecutive_failures: 5,
        open_for: Duration::from_secs(30),
        open_for_max: Duration::from_secs(20 * 60),
        probe: true,
        probe_interval: Duration::from_secs(10),
        half_open_probes: NonZeroU32::new(5).unwrap(),
        ramp: Duration::from_secs(300),
        ramp_failure_rate: 0.10,
    }
}

/// Feed `rps` outcomes per second for `secs` seconds, failing with probability `fail`; returns
/// the first transition and when it happened.
fn drive(
    b: &mut Breaker,
    rng: &mut fastrand::Rng,
    start: Instant,
    secs: f64,
    rps: u32,
    fail: f64,
) -> Option<(Duration, Transition)> {
    let step = Duration::from_secs(1) / rps;
    let n = (secs * f64::from(rps)) as u32;
    for i in 0..n {
        let now = start + step * i;
        if let Some(t) = b.record_at(now, rng.f64() < fail) {
            return Some((now - start, t));
        }
    }
    None
}

#[test]
fn a_total_outage_trips_within_consecutive_failures_at_low_volume() {
    let t0 = Instant::now();
    let mut b = Breaker::new(policy(), t0);
    let mut rng = fastrand::Rng::with_seed(1);
    assert!(drive(&mut b, &mut rng, t0, 120.0, 1, 0.0).is_none());
    let start = t0 + Duration::from_secs(120);
    let (after, t) = drive(&mut b, &mut rng, start, 60.0, 1, 1.0).unwrap();
    assert_eq!(t.reason, TripReason::ConsecutiveFailures);
    assert_eq!(after, Duration::from_secs(4), "the fifth failure trips it");
    assert_eq!(b.state(start + after), State::Open);
}

#[test]
fn a_total_outage_trips_within_two_seconds_at_high_volume_after_a_healthy_history() {
    let t0 = Instant::now();
    let mut b = Breaker::new(policy(), t0);
    let mut rng = fastrand::Rng::with_seed(2);
    assert!(drive(&mut b, &mut rng, t0, 59.0, 1000, 0.01).is_none());
    let start = t0 + Duration::from_secs(59);
    let (after, t) = drive(&mut b, &mut rng, start, 10.0, 1000, 1.0).unwrap();
    assert!(after < Duration::from_secs(2), "{after:?} {t:?}");
    assert_eq!(t.to, State::Open);
}

#[test]
fn a_partial_outage_trips_once_min_requests_is_reached() {
    let t0 = Instant::now();
    let mut b = Breaker::new(policy(), t0);
    let mut trip = None;
    for i in 0..100u32 {
        // ok, fail, ok, fail...: 50%, never two failures in a row.
        if let Some(t) = b.record_at(t0 + Duration::from_millis(100) * i, i % 2 == 1) {
            trip = Some((i + 1, t));
            break;
        }
    }
    let (n, t) = trip.unwrap();
    assert_eq!(t.reason, TripReason::FailureRate);
    assert_eq!(n, 20);
}

#[test]
fn a_steady_twenty_percent_error_rate_never_trips() {
    for (rps, secs, seed) in [(1, 7200.0, 3), (1000, 300.0, 4), (20, 3600.0, 5)] {
        let t0 = Instant::now();
        let mut b = Breaker::new(policy(), t0);
        let mut rng = fastrand::Rng::with_seed(seed);
        let tripped = drive(&mut b, &mut rng, t0, secs, rps, 0.20);
        assert!(tripped.is_none(), "{rps} rps: {tripped:?}");
    }
}

#[test]
fn a_run_of_failures_on_a_noisy_target_does_not_trip_it() {
    let t0 = Instant::now();
    let mut b = Breaker::new(policy(), t0);
    // 30 s at 1 rps with every fifth request failing, then `consecutive_failures` in a row: a
    // target that fails one time in five makes such runs now and then.
    for i in 0..30u32 {
        assert!(b
            .record_at(t0 + Duration::from_secs(u64::from(i)), i % 5 == 0)
            .is_none());
    }
    for i in 30..35u32 {
        assert!(
            b.record_at(t0 + Duration::from_secs(u64::from(i)), true)
                .is_none(),
            "at {i}"
        );
    }
}

fn trip_now(b: &mut Breaker, now: Instant) {
    for _ in 0..5 {
        b.record_at(now, true);
    }
    assert_eq!(b.state(now), State::Open);
}

/// Run probes until closed; returns when it closed.
fn probe_until_closed(b: &mut Breaker, mut now: Instant, healthy_from: Instant) -> Instant {
    for _ in 0..300_000 {
        let (due, _) = b.probe_due(now);
        if due {
            if let Some(t) = b.record_at(now, now < healthy_from) {
                if t.to == State::Closed {
                    return now;
                }
            }
        }
        now += Duration::from_millis(10);
    }
    panic!("never closed");
}

#[test]
fn open_admits_no_user_traffic_then_probes_close_it_with_a_ramp() {
    let t0 = Instant::now();
    let mut b = Breaker::new(policy(), t0);
    trip_now(&mut b, t0);
    for s in [0, 10, 29] {
        let now = t0 + Duration::from_secs(s);
        assert!(!b.admit(now, 0.0).0, "no user traffic while open");
        assert!(!b.probe_due(now).0, "no probe during the hold");
    }
    let hold_end = t0 + Duration::from_secs(30);
    assert_eq!(b.state(hold_end), State::HalfOpen);
    assert!(
        !b.admit(hold_end, 0.0).0,
        "probes, not users, test a half-open target"
    );
    let closed = probe_until_closed(&mut b, hold_end, hold_end);
    assert!(
        closed - hold_end < Duration::from_secs(1),
        "{:?}",
        closed - hold_end
    );
    assert_eq!(b.state(closed), State::Closed);
    // The ramp: about 10% of traffic at first, all of it after `ramp`.
    let admitted = (0..1000)
        .filter(|i| b.admit(closed, f64::from(*i) / 1000.0).0)
        .count();
    assert!((90..=110).contains(&admitted), "{admitted}");
    let later = closed + Duration::from_secs(300);
    assert!((0..1000).all(|i| b.admit(later, f64::from(i) / 1000.0).0));
}

#[test]
fn a_target_down_for_a_minute_returns_within_one_probe_interval_of_recovering() {
    let t0 = Instant::now();
    let mut b = Breaker::new(policy(), t0);
    trip_now(&mut b, t0);
    let recovered = t0 + Duration::from_secs(61);
    let closed = probe_until_closed(&mut b, t0, recovered);
    assert!(closed >= recovered);
    assert!(
        closed - recovered <= Duration::from_secs(11),
        "{:?}",
        closed - recovered
    );
    assert_eq!(
        b.snapshot(closed).opens,
        1,
        "probe failures are one outage, not new opens"
    );
}

#[test]
fn flip_flopping_doubles_the_hold_up_to_the_max() {
    let t0 = Instant::now();
    let mut b = Breaker::new(policy(), t0);
    let mut now = t0;
    let mut holds = Vec::new();
    for _ in 0..8 {
        trip_now(&mut b, now);
        holds.push(b.snapshot(now).hold.as_secs());
        now = probe_until_closed(&mut b, now, now);
        now += Duration::from_secs(1); // re-opens during the ramp
    }
    assert_eq!(holds, [30, 60, 120, 240, 480, 960, 1200, 1200]);
    // Healthy long enough after closing: the next trip starts from `open_for` again.
    trip_now(&mut b, now);
    now = probe_until_closed(&mut b, now, now) + Duration::from_secs(400);
    trip_now(&mut b, now);
    assert_eq!(b.snapshot(now).hold.as_secs(), 30);
}

#[test]
fn a_failing_ramp_reopens() {
    let t0 = Instant::now();
    let mut b = Breaker::new(policy(), t0);
    trip_now(&mut b, t0);
    let closed = probe_until_closed(&mut b, t0, t0);
    let mut rng = fastrand::Rng::with_seed(9);
    let (_, t) = drive(&mut b, &mut rng, closed, 60.0, 100, 0.15).unwrap();
    assert_eq!(t.reason, TripReason::RampFailureRate);
    assert_eq!(
        b.snapshot(closed).hold.as_secs(),
        60,
        "doubled: it flip-flopped"
    );
}

#[test]
fn a_provider_recovering_with_fifteen_percent_errors_cycles_at_most_once_per_hold() {
    let t0 = Instant::now();
    let mut b = Breaker::new(policy(), t0);
    let mut rng = fastrand::Rng::with_seed(11);
    trip_now(&mut b, t0);
    let mut opens_at = vec![t0];
    let mut now = t0;
    let end = t0 + Duration::from_secs(3600);
    while now < end {
        now += Duration::from_millis(10); // 100 rps of user traffic when admitted
        let failed = rng.f64() < 0.15;
        let (due, _) = b.probe_due(now);
        let t = if due || b.admit(now, rng.f64()).0 {
            b.record_at(now, failed)
        } else {
            None
        };
        if let Some(t) = t {
            if t.from == State::Closed && t.to == State::Open {
                opens_at.push(now);
            }
        }
    }
    for pair in opens_at.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= Duration::from_secs(30),
            "re-opened {gap:?} after the previous open"
        );
    }
    // Each cycle holds longer: far fewer than one cycle per 30 s.
    assert!(opens_at.len() < 10, "{} opens in an hour", opens_at.len());
}

#[test]
fn manual_overrides() {
    let t0 = Instant::now();
    let mut b = Breaker::new(policy(), t0);
    let t = b.manual(t0, Manual::Open).unwrap();
    assert_eq!(
        (t.from, t.to, t.reason),
        (State::Closed, State::Open, TripReason::Manual)
    );
    let much_later = t0 + Duration::from_secs(86_400);
    assert_eq!(
        b.state(much_later),
        State::Open,
        "held until an operator closes it"
    );
    assert!(!b.probe_due(much_later).0);
    assert_eq!(b.recovery_eta(much_later), Duration::MAX);
    b.manual(much_later, Manual::Close).unwrap();
    assert!(
        b.admit(much_later, 0.99).0,
        "a manual close returns all traffic at once"
    );
    trip_now(&mut b, much_later);
    b.manual(much_later, Manual::Reset).unwrap();
    let s = b.snapshot(much_later);
    assert_eq!(
        (s.state, s.opens, s.requests_in_window),
        (State::Closed, 0, 0)
    );
    assert!(
        b.manual(much_later, Manual::Close).is_none(),
        "no-op: already closed"
    );
}

#[test]
fn a_request_sent_before_the_trip_does_not_pass_for_the_probe() {
    let t0 = Instant::now();
    let mut p = policy();
    p.half_open_probes = NonZeroU32::MIN;
    let mut b = Breaker::new(p, t0);
    let sent = t0;
    let tripped = t0 + Duration::from_secs(1);
    trip_now(&mut b, tripped);
    let probed = tripped + Duration::from_secs(30);
    assert!(b.probe_due(probed).0);
    // A long request sent before the trip answers while the probe is in flight: neither its
    // success nor its failure is the probe's.
    let answered = probed + Duration::from_millis(5);
    assert_eq!(b.record(sent, answered, false), None);
    assert_eq!(b.record(sent, answered, true), None);
    assert_eq!(b.state(answered), State::HalfOpen);
    assert!(!b.probe_due(answered).0, "the probe is still in flight");
    let closed = b.record(probed, answered, false).unwrap();
    assert_eq!(
        (closed.to, closed.reason),
        (State::Closed, TripReason::Recovered)
    );
}

#[test]
fn failures_of_requests_sent_before_a_close_do_not_count_against_the_ramp() {
    let t0 = Instant::now();
    let mut b = Breaker::new(policy(), t0);
    let sent = t0;
    let tripped = t0 + Duration::from_secs(1);
    trip_now(&mut b, tripped);
    let hold_end = tripped + Duration::from_secs(30);
    let closed = probe_until_closed(&mut b, hold_end, hold_end);
    for i in 0..20 {
        assert_eq!(
            b.record(sent, closed + Duration::from_millis(i), true),
            None
        );
    }
    assert_eq!(b.state(closed + Duration::from_secs(1)), State::Closed);
    // The same failures of requests sent after the close reopen it.
    let reopened = (0..20)
        .find_map(|i| {
            b.record_at(
                closed + Duration::from_secs(1) + Duration::from_millis(i),
                true,
            )
        })
        .unwrap();
    assert_eq!(reopened.to, State::Open);
}

#[test]
fn client_traffic_trial_with_probes_off() {
    let t0 = Instant::now();
    let mut p = policy();
    p.probe = false;
    let mut b = Breaker::new(p, t0);
    trip_now(&mut b, t0);
    let now = t0 + Duration::from_secs(30);
    assert!(b.admit(now, 0.5).0, "one trial request");
    assert!(!b.admit(now, 0.5).0, "only one at a time");
    assert!(b.record_at(now, false).is_none());
    let next = now + Duration::from_millis(500);
    assert!(b.admit(next, 0.5).0);
}

// --- cluster: other replicas' counts and states ---------------------------------------------

fn remote(window: (u32, u32), recent: (u32, u32)) -> Remote {
    Remote { window, recent }
}

#[test]
fn the_clusters_failure_share_trips_a_replica_that_saw_too_little_alone() {
    let t0 = Instant::now();
    let mut b = Breaker::new(policy(), t0);
    // Here: 8 requests, 4 failed (below min_requests = 20, not 5 in a row).
    for i in 0..8 {
        assert_eq!(
            b.record_at(t0 + Duration::from_millis(i * 100), i % 2 == 0),
            None
        );
    }
    let now = t0 + Duration::from_secs(1);
    // The others saw 12 with 4 failed: 8 of 20 cluster-wide is 40%.
    let t = b.set_remote(now, remote((12, 4), (0, 0))).unwrap();
    assert_eq!(t.reason, TripReason::FailureRate);
    assert_eq!(b.state(now), State::Open);
}

#[test]
fn remote_counts_below_the_share_or_without_failures_do_not_trip() {
    let t0 = Instant::now();
    let mut b = Breaker::new(policy(), t0);
    for i in 0..8 {
        b.record_at(t0 + Duration::from_millis(i * 100), i % 2 == 0);
    }
    let now = t0 + Duration::from_secs(1);
    // 4 + 3 failed of 8 + 12 = 35%: under 40%.
    assert_eq!(b.set_remote(now, remote((12, 3), (0, 0))), None);
    assert_eq!(b.state(now), State::Closed);
    assert_eq!(b.snapshot(now).requests_in_window, 20);
    // Replaced, not added, at the next sync: the same counts again change nothing.
    assert_eq!(b.set_remote(now, remote((12, 3), (0, 0))), None);
    assert_eq!(b.snapshot(now).requests_in_window, 20);
    // The recent-share rule counts the others' last seconds too (4 x min_requests = 80).
    let t = b.set_remote(now, remote((100, 40), (100, 40))).unwrap();
    assert_eq!(t.reason, TripReason::FailureRate);
}

#[test]
fn a_state_decided_elsewhere_is_taken_over() {
    let t0 = Instant::now();
    let mut b = Breaker::new(policy(), t0);
    let open = Adopt::Open {
        remaining: Some(Duration::from_secs(20)),
        hold: Duration::from_secs(60),
        opens: 3,
    };
    let t = b.adopt(t0, open).unwrap();
    assert_eq!(
        (t.from, t.to, t.reason),
        (State::Closed, State::Open, TripReason::Cluster)
    );
    assert!(!b.admit(t0, 0.0).0);
    // The other replica's hold is what is left, not a fresh open_for.
    assert_eq!(b.recovery_eta(t0), Duration::from_secs(20));
    assert_eq!(b.snapshot(t0).opens, 3);
    assert_eq!(b.snapshot(t0).hold, Duration::from_secs(60));
    assert_eq!(b.state(t0 + Duration::from_secs(20)), State::HalfOpen);
    // Taking over the same state again is no transition.
    assert_eq!(b.adopt(t0, open), None);

    // Recovered elsewhere: closed here too, with the ramp.
    let now = t0 + Duration::from_secs(25);
    let t = b.adopt(now, Adopt::Close { ramp: true }).unwrap();
    assert_eq!((t.to, t.reason), (State::Closed, TripReason::Cluster));
    assert!(b.snapshot(now).traffic_share < 0.2);
    // A trip soon after is a flip-flop here as well: the hold doubles from the adopted one.
    let later = now + Duration::from_secs(1);
    let t = b.set_remote(later, remote((40, 40), (0, 0))).unwrap();
    assert_eq!(t.to, State::Open);
    assert_eq!(b.snapshot(later).hold, Duration::from_secs(120));

    // An operator's reset elsewhere forgets the history here.
    b.adopt(later, Adopt::Reset);
    let s = b.snapshot(later);
    assert_eq!(
        (s.state, s.opens, s.hold),
        (State::Closed, 0, Duration::from_secs(30))
    );
    assert_eq!(s.traffic_share, 1.0);
}

#[test]
fn a_closing_breaker_forgets_the_others_counts() {
    let t0 = Instant::now();
    let mut b = Breaker::new(policy(), t0);
    b.set_remote(t0, remote((40, 30), (0, 0)));
    assert_eq!(b.state(t0), State::Open);
    b.manual(t0, Manual::Close);
    // The failures the others saw before the close do not count after it.
    assert_eq!(b.snapshot(t0).requests_in_window, 0);
    assert_eq!(b.record_at(t0, true), None);
}

#[test]
fn published_states_describe_the_breaker() {
    let t0 = Instant::now();
    let mut b = Breaker::new(policy(), t0);
    assert_eq!(b.to_adopt(t0), Adopt::Reset);
    b.set_remote(t0, remote((40, 30), (0, 0)));
    assert_eq!(
        b.to_adopt(t0 + Duration::from_secs(10)),
        Adopt::Open {
            remaining: Some(Duration::from_secs(20)),
            hold: Duration::from_secs(30),
            opens: 1
        }
    );
    b.manual(t0, Manual::Open);
    assert!(matches!(
        b.to_adopt(t0),
        Adopt::Open {
            remaining: None,
            ..
        }
    ));
    b.manual(t0, Manual::Close);
    assert_eq!(b.to_adopt(t0), Adopt::Close { ramp: false });
}

#[test]
fn a_hold_already_over_elsewhere_is_taken_over_as_testing_in_one_transition() {
    let t0 = Instant::now();
    let mut b = Breaker::new(policy(), t0);
    let t = b
        .adopt(
            t0,
            Adopt::Open {
                remaining: Some(Duration::ZERO),
                hold: Duration::from_secs(30),
                opens: 1,
            },
        )
        .unwrap();
    assert_eq!((t.from, t.to), (State::Closed, State::HalfOpen));
    // No second transition (open -> half-open) on the next call.
    assert_eq!(b.set_remote(t0, Remote::default()), None);
    assert_eq!(b.probe_due(t0), (true, None));
}

#[test]
fn a_close_taken_over_by_a_closed_breaker_starts_its_counts_over() {
    let t0 = Instant::now();
    let mut b = Breaker::new(policy(), t0);
    for i in 0..10 {
        b.record_at(t0 + Duration::from_millis(i * 10), i % 3 == 0);
    }
    assert_eq!(b.adopt(t0, Adopt::Close { ramp: true }), None);
    assert_eq!(b.snapshot(t0).requests_in_window, 0);
}

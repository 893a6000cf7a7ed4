use super::*;

const INTERVAL: Duration = Duration::from_secs(5);

fn rules() -> Rules {
    Rules {
        interval: INTERVAL,
        floor: 0.02,
        max_step: 0.20,
        trip_rate: 0.4,
    }
}

/// An interval of `n` attempts answered at `ms` (p90), `failed` of them failures, breaker
/// closed.
fn sample(ms: f64, n: u64, failed: u64) -> Sample {
    Sample {
        ok: n - failed,
        failed,
        latency: Some((Duration::from_secs_f64(ms / 1000.0), n - failed)),
        ttft: None,
        headroom: None,
        gate: 1.0,
    }
}

fn shares(s: &Shares) -> Vec<f64> {
    s.tracks.iter().map(|t| t.share).collect()
}

/// Run `intervals` intervals with the samples `each(i)` gives, checking the invariants every
/// step (shares sum to 1, none moves more than `max_step`); the shares after each.
fn run(
    s: &mut Shares,
    priors: &[f64],
    prices: &[Option<f64>],
    intervals: usize,
    mut each: impl FnMut(usize) -> Vec<Sample>,
) -> Vec<Vec<f64>> {
    let mut history = Vec::with_capacity(intervals);
    for i in 0..intervals {
        let before = shares(s);
        let samples = each(i);
        s.step(&rules(), priors, prices, &samples);
        let after = shares(s);
        let sum: f64 = after.iter().sum();
        assert!(
            (sum - 1.0).abs() < 1e-9,
            "interval {i}: shares sum to {sum}"
        );
        // A target the breaker takes out gives its share to the others at once.
        let gated = samples.iter().any(|s| s.gate == 0.0);
        for (j, (a, b)) in before.iter().zip(&after).enumerate() {
            assert!(
                gated || (a - b).abs() <= rules().max_step + 1e-9,
                "interval {i}: target {j}'s share moved from {a} to {b}"
            );
        }
        history.push(after);
    }
    history
}

fn noisy(rng: &mut fastrand::Rng, ms: f64) -> f64 {
    ms * (0.85 + 0.3 * rng.f64())
}

#[test]
fn before_anything_is_measured_the_split_is_the_priors() {
    let mut s = Shares::new(&[3.0, 1.0]);
    assert_eq!(shares(&s), vec![0.75, 0.25]);
    let idle = Sample {
        gate: 1.0,
        ..Sample::default()
    };
    let h = run(&mut s, &[3.0, 1.0], &[None, None], 10, |_| {
        vec![idle.clone(); 2]
    });
    let last = h.last().cloned().unwrap_or_default();
    assert!(
        (last[0] - 0.75).abs() < 1e-9 && (last[1] - 0.25).abs() < 1e-9,
        "{last:?}"
    );
    assert_eq!(s.tracks[0].reason, Reason::Healthy);
}

#[test]
fn two_equal_targets_do_not_swing_on_noise() {
    // Two hours of latency noise of +-15% and a failure now and then, on both.
    let mut s = Shares::new(&[1.0, 1.0]);
    let mut rng = fastrand::Rng::with_seed(7);
    let h = run(&mut s, &[1.0, 1.0], &[None, None], 1440, |_| {
        (0..2)
            .map(|_| sample(noisy(&mut rng, 100.0), 50, u64::from(rng.f64() < 0.3)))
            .collect()
    });
    let first: Vec<f64> = h.iter().map(|v| v[0]).collect();
    let lo = first.iter().copied().fold(1.0, f64::min);
    let hi = first.iter().copied().fold(0.0, f64::max);
    assert!(
        hi - lo < 0.05,
        "the first target's share swung from {lo} to {hi}"
    );
}

#[test]
fn a_brownout_moves_traffic_off_within_a_few_intervals_and_back_on_recovery() {
    let priors = [1.0, 1.0, 1.0];
    let mut s = Shares::new(&priors);
    let mut rng = fastrand::Rng::with_seed(3);
    // Ten minutes healthy, then the first target three times slower for ten minutes, then
    // healthy again: never enough failures for a breaker.
    let h = run(&mut s, &priors, &[None; 3], 360, |i| {
        let slow = (120..240).contains(&i);
        (0..3)
            .map(|t| {
                let ms = if t == 0 && slow { 300.0 } else { 100.0 };
                sample(noisy(&mut rng, ms), 60, 0)
            })
            .collect()
    });
    assert!((h[119][0] - 1.0 / 3.0).abs() < 0.02, "before: {:?}", h[119]);
    // Within three intervals of the brownout, the first target has lost most of its share...
    assert!(h[122][0] < 0.1, "after 3 intervals: {:?}", h[122]);
    // ...and it keeps what still measures it while slow: two of the 180 requests an interval.
    assert!(
        (h[239][0] - 2.0 / 180.0).abs() < 1e-6,
        "during: {:?}",
        h[239]
    );
    // Within a few intervals of recovering, it has its share back.
    assert!(
        (h[250][0] - 1.0 / 3.0).abs() < 0.02,
        "after recovery: {:?}",
        h[250]
    );
}

#[test]
fn errors_cost_share_well_before_the_breaker_would_trip() {
    let priors = [1.0, 1.0];
    let mut s = Shares::new(&priors);
    // 10% failures: a quarter of the trip rate.
    let h = run(&mut s, &priors, &[None; 2], 40, |i| {
        let failed = if (10..30).contains(&i) { 6 } else { 0 };
        vec![sample(100.0, 60, failed), sample(100.0, 60, 0)]
    });
    assert!(h[20][0] < 0.42, "during: {:?}", h[20]);
    assert_eq!(s.tracks[0].reason, Reason::Healthy, "recovered");
    assert!((h[39][0] - 0.5).abs() < 0.02, "after: {:?}", h[39]);
}

#[test]
fn a_target_the_breaker_keeps_out_has_no_share_at_once_and_returns_by_the_ramp_and_step() {
    let priors = [1.0, 1.0];
    let mut s = Shares::new(&priors);
    let open = Sample {
        gate: 0.0,
        ..Sample::default()
    };
    let h = run(&mut s, &priors, &[None; 2], 12, |i| {
        let first = match i {
            0..=4 => open.clone(),
            // Closed again, ramping: its breaker admits 10%, then 60%.
            5 => Sample {
                gate: 0.1,
                ..sample(100.0, 5, 0)
            },
            6 => Sample {
                gate: 0.6,
                ..sample(100.0, 20, 0)
            },
            _ => sample(100.0, 40, 0),
        };
        vec![first, sample(100.0, 60, 0)]
    });
    assert_eq!(h[0][0], 0.0, "open: no share, at once");
    assert_eq!(s.tracks.len(), 2);
    assert!(h[5][0] <= 0.1 + 1e-9, "ramping at 10%: {:?}", h[5]);
    assert!(
        h[6][0] <= 0.1 + 0.2 + 1e-9,
        "the step caps the climb: {:?}",
        h[6]
    );
    assert!((h[11][0] - 0.5).abs() < 1e-6, "back: {:?}", h[11]);
}

#[test]
fn the_baseline_follows_slow_drift_but_not_a_step() {
    let priors = [1.0, 1.0];
    // Both targets drift 50% slower over an hour: nothing moves.
    let mut s = Shares::new(&priors);
    let h = run(&mut s, &priors, &[None; 2], 720, |i| {
        let ms = 100.0 * (1.0 + 0.5 * i as f64 / 720.0);
        vec![sample(ms, 60, 0), sample(ms, 60, 0)]
    });
    assert!(
        h.iter().all(|v| (v[0] - 0.5).abs() < 1e-6),
        "{:?}",
        h.last()
    );
    // Only the first drifts, 40% over an hour: within both bands, nothing moves either.
    let mut s = Shares::new(&priors);
    let h = run(&mut s, &priors, &[None; 2], 720, |i| {
        let ms = 100.0 * (1.0 + 0.4 * i as f64 / 720.0);
        vec![sample(ms, 60, 0), sample(100.0, 60, 0)]
    });
    assert!((h[719][0] - 0.5).abs() < 0.02, "{:?}", h[719]);
    // The same 40% as a step: slower than its own baseline, it loses share.
    let mut s = Shares::new(&priors);
    let h = run(&mut s, &priors, &[None; 2], 240, |i| {
        let ms = if i < 120 { 100.0 } else { 140.0 };
        vec![sample(ms, 60, 0), sample(100.0, 60, 0)]
    });
    assert!(h[125][0] < 0.45, "{:?}", h[125]);
    assert_eq!(s.tracks[0].reason, Reason::Slower);
}

#[test]
fn a_healthy_target_never_goes_below_the_floor() {
    // Ten times slower than its peers from the start: that is how it is, not a departure from
    // its own baseline, so it keeps the whole floor.
    let priors = [1.0, 1.0, 1.0];
    let mut s = Shares::new(&priors);
    let h = run(&mut s, &priors, &[None; 3], 100, |_| {
        vec![
            sample(1000.0, 60, 0),
            sample(100.0, 60, 0),
            sample(100.0, 60, 0),
        ]
    });
    assert!(h.iter().all(|v| v[0] >= 0.02 - 1e-9), "{:?}", h.last());
    assert!((h[99][0] - 0.02).abs() < 1e-6, "{:?}", h[99]);
    assert!((h[99][1] - 0.49).abs() < 1e-6, "{:?}", h[99]);
    assert_eq!(s.tracks[0].reason, Reason::SlowerThanPeers);
}

#[test]
fn a_degraded_target_keeps_what_still_measures_it() {
    // Failing a third of its calls and fifty times slower than it was: not healthy, so it
    // keeps only the trickle that shows it recover: two requests an interval, within a quarter
    // of the floor and the floor.
    let degraded = |per_target: u64, intervals: usize| {
        let priors = [1.0, 1.0, 1.0];
        let mut s = Shares::new(&priors);
        run(&mut s, &priors, &[None; 3], intervals, |i| {
            let first = if i < 10 {
                sample(100.0, per_target, 0)
            } else {
                sample(5000.0, per_target, per_target / 3)
            };
            vec![
                first,
                sample(100.0, per_target, 0),
                sample(100.0, per_target, 0),
            ]
        })
    };
    // 1,800 requests an interval: a quarter of the floor is more than two of them.
    let h = degraded(600, 100);
    assert!(h.iter().all(|v| v[0] >= 0.005 - 1e-9), "{:?}", h.last());
    assert!((h[99][0] - 0.005).abs() < 1e-6, "{:?}", h[99]);
    assert!((h[99][1] - 0.4975).abs() < 1e-6, "{:?}", h[99]);
    // 240 an interval: two of them, 1/120.
    let h = degraded(80, 100);
    assert!((h[99][0] - 2.0 / 240.0).abs() < 1e-6, "{:?}", h[99]);
    // 30: two of them would be more than the floor, which caps it.
    let h = degraded(10, 100);
    assert!((h[99][0] - 0.02).abs() < 1e-6, "{:?}", h[99]);
}

#[test]
fn a_provider_near_its_rate_limit_and_a_dearer_one_get_less() {
    let priors = [1.0, 1.0];
    let mut s = Shares::new(&priors);
    let h = run(&mut s, &priors, &[None; 2], 10, |_| {
        let near = Sample {
            headroom: Some(0.03),
            ..sample(100.0, 60, 0)
        };
        vec![near, sample(100.0, 60, 0)]
    });
    assert!(h[9][0] < 0.3, "{:?}", h[9]);
    assert_eq!(s.tracks[0].reason, Reason::RateLimited);

    let mut s = Shares::new(&priors);
    let h = run(&mut s, &priors, &[Some(10.0), Some(2.5)], 10, |_| {
        vec![sample(100.0, 60, 0), sample(100.0, 60, 0)]
    });
    assert!(
        (h[9][0] - 0.2).abs() < 1e-6,
        "a quarter of the price per token: {:?}",
        h[9]
    );
    assert_eq!(s.tracks[0].reason, Reason::Price);
}

#[test]
fn bounds_are_kept_when_filling() {
    // Floors, caps and zero weights together.
    let v = fill(&[0.0, 1.0, 100.0], &[0.1, 0.1, 0.1], &[1.0, 0.3, 1.0]);
    assert!((v.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{v:?}");
    assert!(
        (v[0] - 0.1).abs() < 1e-9 && v[1] >= 0.1 && v[1] <= 0.3,
        "{v:?}"
    );
    // Nothing eligible: nothing shared.
    assert_eq!(
        fill(&[1.0, 1.0], &[0.02, 0.02], &[0.0, 0.0]),
        vec![0.0, 0.0]
    );
}

//! Picking one policy key across the layers (route, then `[defaults]`, then built-in) and
//! checking its value, remembering the key path it was written at for errors.

use std::num::NonZeroU32;
use std::time::Duration;

use super::policy::Layer;
use super::Ctx;
use crate::config::file::DurationText;
use crate::config::format_duration;

/// One key's winning value and the path it was written at (or where it belongs, if unset).
pub(super) struct Picked<'r, V: ?Sized> {
    pub value: Option<&'r V>,
    pub path: String,
    /// Set by the first (highest-priority) layer.
    own: bool,
}

/// One section (`failover`, `breaker`...) across the layers.
pub(super) struct Section<'a, 'r, S> {
    pub layers: &'a [Layer<'r>],
    pub name: &'static str,
    pub get: fn(&Layer<'r>) -> Option<&'r S>,
}

impl<'r, S> Section<'_, 'r, S> {
    pub(super) fn key<V: ?Sized>(
        &self,
        key: &str,
        field: impl Fn(&'r S) -> Option<&'r V>,
    ) -> Picked<'r, V> {
        for (i, layer) in self.layers.iter().enumerate() {
            if let Some(value) = (self.get)(layer).and_then(&field) {
                let path = format!("{}.{}.{key}", layer.prefix, self.name);
                return Picked {
                    value: Some(value),
                    path,
                    own: i == 0,
                };
            }
        }
        let home = self.layers.first().map_or("", |l| l.prefix.as_str());
        let path = format!("{home}.{}.{key}", self.name);
        Picked {
            value: None,
            path,
            own: false,
        }
    }

    /// Whether a rule between two keys is checked here: with `[defaults]` present, a pair that
    /// the route does not set was already checked (and reported) for `[defaults]` itself.
    pub(super) fn checks<A: ?Sized, B: ?Sized>(
        &self,
        a: &Picked<'_, A>,
        b: &Picked<'_, B>,
    ) -> bool {
        self.layers.len() == 1 || a.own || b.own
    }
}

pub(super) fn dur(
    ctx: &mut Ctx<'_>,
    p: &Picked<'_, DurationText>,
    default: Duration,
    positive: bool,
) -> Option<Duration> {
    match p.value {
        None => Some(default),
        Some(raw) => ctx.duration(&p.path, &raw.0, positive),
    }
}

/// A duration for a message: as written in the file, else the built-in default.
pub(super) fn shown(p: &Picked<'_, DurationText>, value: Duration) -> String {
    match p.value {
        Some(raw) if !raw.0.contains("${") => raw.0.trim().to_owned(),
        _ => format_duration(value),
    }
}

/// A share: in (0, 1], or in [0, 1] when `zero_ok`.
pub(super) fn share(
    ctx: &mut Ctx<'_>,
    p: &Picked<'_, f64>,
    default: f64,
    zero_ok: bool,
) -> Option<f64> {
    let Some(&x) = p.value else {
        return Some(default);
    };
    let ok = if zero_ok {
        (0.0..=1.0).contains(&x)
    } else {
        x > 0.0 && x <= 1.0
    };
    if ok {
        return Some(x);
    }
    let hint = if zero_ok {
        "a share from 0 to 1, e.g. 0.10 for 10%"
    } else {
        "a share above 0 and at most 1, e.g. 0.40 for 40%"
    };
    ctx.error(&p.path, format!("{x} is out of range"), hint);
    None
}

pub(super) fn at_least_one(
    ctx: &mut Ctx<'_>,
    p: &Picked<'_, u32>,
    default: NonZeroU32,
    hint: &str,
) -> Option<NonZeroU32> {
    let Some(&n) = p.value else {
        return Some(default);
    };
    let n = NonZeroU32::new(n);
    if n.is_none() {
        ctx.error(&p.path, "must be at least 1", hint);
    }
    n
}

/// One of a fixed set of words.
pub(super) fn word<T: Copy>(
    ctx: &mut Ctx<'_>,
    p: &Picked<'_, String>,
    default: T,
    choices: &[(&str, T)],
) -> Option<T> {
    let Some(raw) = p.value else {
        return Some(default);
    };
    let text = ctx.text(&p.path, raw)?;
    let found = choices
        .iter()
        .find(|(name, _)| *name == text)
        .map(|&(_, v)| v);
    if found.is_none() {
        let names: Vec<String> = choices.iter().map(|(n, _)| format!("\"{n}\"")).collect();
        ctx.error(
            &p.path,
            format!("unknown value `{text}`"),
            format!("expected {}", names.join(" or ")),
        );
    }
    found
}

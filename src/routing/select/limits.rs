//! Providers' rate-limit headers, read into one number: the lowest remaining/limit share over
//! what they limit (OpenAI `x-ratelimit-remaining-requests` / `x-ratelimit-limit-requests` and
//! the same for `tokens`; Anthropic `anthropic-ratelimit-{requests,tokens,input-tokens,
//! output-tokens}-{remaining,limit}`). Adaptive selection moves traffic off a target that is
//! about to be throttled, before its 429s.

use http::HeaderMap;

/// What a provider limits, in the order of the slots below.
const KINDS: [&str; 4] = ["requests", "tokens", "input-tokens", "output-tokens"];

/// The lowest remaining share of any limit the headers report, in 0..=1; `None` when they
/// report none. One pass over the headers: an answer has a handful.
pub fn headroom(headers: &HeaderMap) -> Option<f64> {
    // (remaining, limit) per vendor and kind.
    let mut slots = [[(None::<f64>, None::<f64>); KINDS.len()]; 2];
    for (name, value) in headers {
        let name = name.as_str();
        let (vendor, kind, remaining) =
            if let Some(kind) = name.strip_prefix("x-ratelimit-remaining-") {
                (0, kind, true)
            } else if let Some(kind) = name.strip_prefix("x-ratelimit-limit-") {
                (0, kind, false)
            } else if let Some(rest) = name.strip_prefix("anthropic-ratelimit-") {
                if let Some(kind) = rest.strip_suffix("-remaining") {
                    (1, kind, true)
                } else if let Some(kind) = rest.strip_suffix("-limit") {
                    (1, kind, false)
                } else {
                    continue;
                }
            } else {
                continue;
            };
        let Some(k) = KINDS.iter().position(|x| *x == kind) else {
            continue;
        };
        let Some(v) = value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok())
        else {
            continue;
        };
        let slot = &mut slots[vendor][k];
        if remaining {
            slot.0 = Some(v);
        } else {
            slot.1 = Some(v);
        }
    }
    slots
        .iter()
        .flatten()
        .filter_map(|s| match *s {
            (Some(r), Some(l)) if l > 0.0 && r.is_finite() => Some((r / l).clamp(0.0, 1.0)),
            _ => None,
        })
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn the_lowest_share_of_any_limit() {
        let openai = headers(&[
            ("x-ratelimit-limit-requests", "10000"),
            ("x-ratelimit-remaining-requests", "9000"),
            ("x-ratelimit-limit-tokens", "1000000"),
            ("x-ratelimit-remaining-tokens", "50000"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ]);
        assert_eq!(headroom(&openai), Some(0.05));
        let anthropic = headers(&[
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "49"),
            ("anthropic-ratelimit-input-tokens-limit", "40000"),
            ("anthropic-ratelimit-input-tokens-remaining", "10000"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2026-12-01T00:00:00Z",
            ),
        ]);
        assert_eq!(headroom(&anthropic), Some(0.25));
    }

    #[test]
    fn nothing_to_read_is_none() {
        assert_eq!(
            headroom(&headers(&[("content-type", "application/json")])),
            None
        );
        // A remaining count without its limit, or a limit of 0, says nothing.
        let half = headers(&[
            ("x-ratelimit-remaining-requests", "3"),
            ("anthropic-ratelimit-tokens-limit", "0"),
            ("anthropic-ratelimit-tokens-remaining", "0"),
        ]);
        assert_eq!(headroom(&half), None);
    }
}

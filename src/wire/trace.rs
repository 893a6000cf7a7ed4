//! W3C trace context: the `traceparent` a client sends ([`TraceParent`]), a traced request's
//! ids ([`Trace`]), and the `traceparent` the gateway sends upstream for each attempt
//! ([`TraceParent::header`]).

use http::{HeaderName, HeaderValue};

/// The W3C trace context header (a typed name: a `&str` is parsed on every lookup).
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// A `traceparent` (`00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// Never 0.
    pub trace_id: u128,
    /// The span that sent it; never 0.
    pub parent: u64,
    /// The `sampled` flag: the sender records this trace.
    pub sampled: bool,
}

impl TraceParent {
    /// The header's context; `None` when it is malformed (an all-zero id included) or of
    /// version `ff`. A version above `00` may carry more fields after the flags.
    pub fn parse(header: &HeaderValue) -> Option<TraceParent> {
        let v = header.to_str().ok()?.trim();
        let mut parts = v.split('-');
        let (version, trace, parent, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
        let ok = hex(version, 2)
            && !version.eq_ignore_ascii_case("ff")
            && hex(trace, 32)
            && hex(parent, 16)
            && hex(flags, 2)
            && (version != "00" || parts.next().is_none());
        if !ok {
            return None;
        }
        let trace_id = u128::from_str_radix(trace, 16).ok()?;
        let parent = u64::from_str_radix(parent, 16).ok()?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        (trace_id != 0 && parent != 0).then_some(TraceParent {
            trace_id,
            parent,
            sampled: flags & 1 == 1,
        })
    }

    /// The trace id as 32 lowercase hex digits.
    pub fn trace_hex(&self) -> String {
        format!("{:032x}", self.trace_id)
    }

    /// The header for a call made by span `span` of this trace, sampled.
    pub fn header(trace_id: u128, span: u64) -> HeaderValue {
        // Written by hand: `format!` of padded hex costs ten times as much, on every attempt
        // of a traced request.
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut text = *b"00-00000000000000000000000000000000-0000000000000000-01";
        for i in 0..32 {
            text[3 + i] = HEX[(trace_id >> (124 - 4 * i) & 0xf) as usize];
        }
        for i in 0..16 {
            text[36 + i] = HEX[(span >> (60 - 4 * i) & 0xf) as usize];
        }
        // Hex digits and dashes only: always a valid header value.
        HeaderValue::from_bytes(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
    }
}

/// The ids of a traced request: its trace, the client's span it continues, and the gateway's
/// server span. Attempt spans are derived from the server span and the attempt's launch
/// number, so the race needs to keep nothing to name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trace {
    pub trace_id: u128,
    /// The client's span (its `traceparent`'s parent id), when it sent one.
    pub parent: Option<u64>,
    /// The gateway's span for the whole request.
    pub span: u64,
}

impl Trace {
    /// A new trace under `client` (or a trace of its own without one).
    pub fn under(client: Option<TraceParent>) -> Trace {
        Trace {
            trace_id: client.map_or_else(|| fastrand::u128(1..), |c| c.trace_id),
            parent: client.map(|c| c.parent),
            span: fresh_span(),
        }
    }

    /// The span of the race's attempt number `seq` (its launch order).
    pub fn attempt_span(&self, seq: usize) -> u64 {
        let id = mix(self.span ^ (seq as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        if id == 0 || id == self.span {
            !self.span
        } else {
            id
        }
    }
}

/// A random span id (never 0).
pub fn fresh_span() -> u64 {
    fastrand::u64(1..)
}

/// SplitMix64's finaliser: distinct inputs give distinct, well-spread outputs.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &'static str) -> Option<TraceParent> {
        TraceParent::parse(&HeaderValue::from_static(s))
    }

    #[test]
    fn valid_traceparents_only() {
        let t = parse("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01");
        assert_eq!(
            t,
            Some(TraceParent {
                trace_id: 0x4bf92f3577b34da6a3ce929d0e0e4736,
                parent: 0x00f067aa0ba902b7,
                sampled: true,
            })
        );
        assert_eq!(
            t.map(|t| t.trace_hex()).as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        let unsampled = parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
        assert_eq!(unsampled.map(|t| t.sampled), Some(false));
        // Level 2 of the spec adds the "random" flag (bit 1): still sampled by bit 0.
        let random = parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03");
        assert_eq!(random.map(|t| t.sampled), Some(true));
        assert_eq!(
            parse("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
            None
        );
        assert_eq!(
            parse("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"),
            None
        );
        assert_eq!(
            parse("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            None
        );
        assert_eq!(parse("00-4bf92f3577b34da6-00f067aa0ba902b7-01"), None);
        assert_eq!(
            parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x"),
            None
        );
        assert_eq!(
            parse("00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            None
        );
        // A later version may add fields.
        assert!(parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x").is_some());
    }

    #[test]
    fn the_header_sent_upstream_round_trips() {
        let h = TraceParent::header(0xabc, 0x12);
        assert_eq!(
            h.to_str().ok(),
            Some("00-00000000000000000000000000000abc-0000000000000012-01")
        );
        assert_eq!(
            TraceParent::parse(&h),
            Some(TraceParent {
                trace_id: 0xabc,
                parent: 0x12,
                sampled: true
            })
        );
        // Every digit in place, as the W3C example writes it.
        let (trace, span) = (
            0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736_u128,
            0x00f0_67aa_0ba9_02b7,
        );
        assert_eq!(
            TraceParent::header(trace, span).to_str().ok(),
            Some(format!("00-{trace:032x}-{span:016x}-01").as_str())
        );
        assert_eq!(
            TraceParent::header(u128::MAX, u64::MAX).to_str().ok(),
            Some(format!("00-{}-{}-01", "f".repeat(32), "f".repeat(16)).as_str())
        );
    }

    #[test]
    fn attempt_spans_differ_from_each_other_and_the_server_span() {
        let t = Trace::under(None);
        let mut seen: Vec<u64> = (0..64).map(|seq| t.attempt_span(seq)).collect();
        seen.push(t.span);
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 65);
        assert!(!seen.contains(&0));
        assert_eq!(t.attempt_span(3), t.attempt_span(3));
        let client = TraceParent {
            trace_id: 7,
            parent: 9,
            sampled: true,
        };
        let under = Trace::under(Some(client));
        assert_eq!((under.trace_id, under.parent), (7, Some(9)));
        assert_ne!(under.span, 9);
    }
}

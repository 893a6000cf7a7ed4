//! Request ids: UUIDv7 (RFC 9562) in the 36-character text form.
//!
//! The first 48 bits are the Unix time in milliseconds at arrival, so ids sort by arrival and
//! an index on them grows at its right edge instead of taking every insert at a random page;
//! the other 74 bits are random, so ids from many gateways do not collide. The audit record's
//! `time_ms` is the time in the id, so a lookup by id is a lookup by time first
//! ([`time_ms`]) and needs no index of its own.

/// A new id for a request arriving now.
pub fn new() -> String {
    uuid_v7(crate::clock::wall_ms(), fastrand::u128(..))
}

/// The arrival time (Unix ms) in an id made by [`new`]; `None` for any other string.
pub fn time_ms(id: &str) -> Option<i64> {
    let b = id.as_bytes();
    if b.len() != 36 || b[8] != b'-' || b[13] != b'-' || b[14] != b'7' {
        return None;
    }
    // The 48-bit time is the first 12 hex digits, around the first dash (decoded by hand:
    // `from_str_radix` twice cost ~600 instructions, on every request the audit log records).
    let mut ms: i64 = 0;
    for &c in b[..8].iter().chain(&b[9..13]) {
        let digit = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => return None,
        };
        ms = (ms << 4) | i64::from(digit);
    }
    Some(ms)
}

/// The UUIDv7 text for `unix_ms` and random bits `rand` (74 of them are used). Written by hand:
/// `format!` with five hex fields cost ~1% of the gateway's CPU per request.
fn uuid_v7(unix_ms: u64, rand: u128) -> String {
    let v = (u128::from(unix_ms & 0xffff_ffff_ffff) << 80)
        | (0x7 << 76)
        | (((rand >> 62) & 0xfff) << 64)
        | (0b10 << 62)
        | (rand & 0x3fff_ffff_ffff_ffff);
    // The 32 digits eight at a time; the dashes go after the 8th, 12th, 16th and 20th.
    let [a, b, c, d] = [96, 64, 32, 0].map(|shift| hex8((v >> shift) as u32));
    let mut out = [b'-'; 36];
    out[..8].copy_from_slice(&a);
    out[9..13].copy_from_slice(&b[..4]);
    out[14..18].copy_from_slice(&b[4..]);
    out[19..23].copy_from_slice(&c[..4]);
    out[24..28].copy_from_slice(&c[4..]);
    out[28..].copy_from_slice(&d);
    // Hex digits and dashes only: always UTF-8. (Written a byte at a time rather than pushed a
    // `char` at a time: each push checked the capacity and encoded the char.)
    String::from_utf8(out.to_vec()).unwrap_or_default()
}

/// The eight lowercase hex digits of `x`, most significant first, made in one 64-bit word: each
/// nibble spread into a byte of its own, then each byte offset to `0`-`9` or `a`-`f` (a digit
/// over 9 gets the 39 between `'9' + 1` and `'a'`). A table lookup per digit cost twice as much.
fn hex8(x: u32) -> [u8; 8] {
    let mut n = u64::from(x);
    n = (n | (n << 16)) & 0x0000_ffff_0000_ffff;
    n = (n | (n << 8)) & 0x00ff_00ff_00ff_00ff;
    n = (n | (n << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    // Now byte k (from the least significant) holds nibble k of `x` counted from the lowest.
    let over9 = ((n + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
    let ascii = n + 0x3030_3030_3030_3030 + over9 * 39;
    ascii.to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_uuid_v7_in_time_order() {
        // RFC 9562's example time: 2022-02-22 19:22:22 UTC.
        let id = uuid_v7(0x017F_22E2_79B0, 0);
        assert_eq!(id, "017f22e2-79b0-7000-8000-000000000000");
        let id = uuid_v7(0x017F_22E2_79B0, u128::MAX);
        assert_eq!(id, "017f22e2-79b0-7fff-bfff-ffffffffffff");
        let early = uuid_v7(1_000, u128::MAX);
        let later = uuid_v7(1_001, 0);
        assert!(early < later, "{early} sorts after {later}");
        let a = new();
        assert_eq!(a.len(), 36);
        assert_ne!(a, new());
    }

    /// The digits made eight at a time read as `format!`'s, in an id as in a UUID's text form.
    #[test]
    fn digits_made_eight_at_a_time_are_formats() {
        for x in [
            0,
            9,
            10,
            0xf,
            0x1234_abcd,
            0x9a9a_9a9a,
            0xdead_beef,
            0x8000_0001,
            u32::MAX,
        ] {
            assert_eq!(hex8(x), *format!("{x:08x}").as_bytes(), "{x:x}");
        }
        let rand = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210_u128;
        let v = (0xabc_def0_1234_u128 << 80)
            | (0x7 << 76)
            | (((rand >> 62) & 0xfff) << 64)
            | (0b10 << 62)
            | (rand & 0x3fff_ffff_ffff_ffff);
        let hex = format!("{v:032x}");
        let want = [
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..],
        ]
        .join("-");
        assert_eq!(uuid_v7(0xabc_def0_1234, rand), want);
    }

    #[test]
    fn the_time_comes_back_out() {
        assert_eq!(
            time_ms(&uuid_v7(0x017F_22E2_79B0, 7)),
            Some(0x017F_22E2_79B0)
        );
        let now = crate::clock::wall_ms() as i64;
        let t = time_ms(&new()).unwrap();
        assert!((now - 1_000..=now + 1_000).contains(&t), "{t} vs {now}");
        // Not ours: the old 16-hex-digit ids, a UUIDv4, garbage.
        assert_eq!(time_ms("0123456789abcdef"), None);
        assert_eq!(time_ms("017f22e2-79b0-4000-8000-000000000000"), None);
        assert_eq!(time_ms("017f22e2-79bx-7000-8000-000000000000"), None);
        assert_eq!(time_ms("+17f22e2-79b0-7000-8000-000000000000"), None);
        assert_eq!(time_ms("é17f22e2-79b0-7000-8000-00000000000"), None);
    }
}

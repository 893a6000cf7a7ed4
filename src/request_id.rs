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
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let v = (u128::from(unix_ms & 0xffff_ffff_ffff) << 80)
        | (0x7 << 76)
        | (((rand >> 62) & 0xfff) << 64)
        | (0b10 << 62)
        | (rand & 0x3fff_ffff_ffff_ffff);
    // Where each of the 16 bytes' two digits go: dashes after the 4th, 6th, 8th and 10th.
    const AT: [usize; 16] = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];
    let mut out = [b'-'; 36];
    for (byte, at) in v.to_be_bytes().into_iter().zip(AT) {
        out[at] = HEX[usize::from(byte >> 4)];
        out[at + 1] = HEX[usize::from(byte & 0xf)];
    }
    // Hex digits and dashes only: always UTF-8. (Written a byte at a time rather than pushed a
    // `char` at a time: each push checked the capacity and encoded the char.)
    String::from_utf8(out.to_vec()).unwrap_or_default()
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

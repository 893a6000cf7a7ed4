//! Runs of plain string bytes, found many bytes at a time, and the other byte tests the
//! scanner makes on its hot path.

/// The high bit of each of the eight bytes of `word` (little-endian) that may be a quote, a
/// backslash or a control character: the lowest one set is the first such byte (a borrow
/// only marks bytes above one that is), none set when there is none.
fn special(word: u64) -> u64 {
    const ONES: u64 = u64::MAX / 255;
    let control = word.wrapping_sub(ONES * 0x20) & !word;
    let quote = word ^ (ONES * u64::from(b'"'));
    let quote = quote.wrapping_sub(ONES) & !quote;
    let backslash = word ^ (ONES * u64::from(b'\\'));
    let backslash = backslash.wrapping_sub(ONES) & !backslash;
    (control | quote | backslash) & (ONES << 7)
}

/// The place of the first byte at or after `i` that may end a run of plain string bytes (a
/// quote, a backslash, a control character, or a byte past ASCII while `high` is [`HIGH`]),
/// or where fewer than eight bytes are left (the caller reads those one at a time). Sixteen
/// bytes at a time with SSE2 (in every x86-64), then eight by [`special`]: an agent's turn
/// is mostly long strings (its history, its tools' descriptions).
#[inline(always)]
pub(super) fn plain_run(b: &[u8], mut i: usize, high: u64) -> usize {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    while let Some(chunk) = b.get(i..i + 16) {
        let Ok(chunk) = <&[u8; 16]>::try_from(chunk) else {
            break;
        };
        let special = special16(chunk, high);
        if special != 0 {
            return i + special.trailing_zeros() as usize;
        }
        i += 16;
    }
    while let Some(chunk) = b.get(i..i + 8) {
        let Ok(chunk) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        let word = u64::from_le_bytes(chunk);
        let special = special(word) | (word & high);
        if special != 0 {
            return i + special.trailing_zeros() as usize / 8;
        }
        i += 8;
    }
    i
}

/// A bit for each of the sixteen bytes of `chunk` (the lowest for the first) that is a
/// quote, a backslash or a control character, or past ASCII when `high` is not 0.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn special16(chunk: &[u8; 16], high: u64) -> u32 {
    use safe_arch::{
        bitor_m128i, cmp_eq_mask_i8_m128i, load_unaligned_m128i, max_u8_m128i, move_mask_i8_m128i,
        set_splat_i8_m128i,
    };
    let v = load_unaligned_m128i(chunk);
    let quote = cmp_eq_mask_i8_m128i(v, set_splat_i8_m128i(b'"' as i8));
    let backslash = cmp_eq_mask_i8_m128i(v, set_splat_i8_m128i(b'\\' as i8));
    // Below 0x20: the larger of it and 0x1f is 0x1f.
    let limit = set_splat_i8_m128i(0x1f);
    let control = cmp_eq_mask_i8_m128i(max_u8_m128i(v, limit), limit);
    let special = bitor_m128i(bitor_m128i(quote, backslash), control);
    let mut bits = move_mask_i8_m128i(special) as u32;
    if high != 0 {
        // The high bit of each byte, set past ASCII.
        bits |= move_mask_i8_m128i(v) as u32;
    }
    bits
}

/// `a == b`, without a call to `memcmp` for what a key is (up to sixteen bytes): its first and
/// last eight bytes (or four) compared as two words, which overlap when it is shorter than
/// sixteen. The keys met are rarely the ones asked for, and often as long: the lengths are
/// compared first.
#[inline(always)]
pub(super) fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        8..=16 => word::<8>(a, 0) == word::<8>(b, 0) && word::<8>(a, n - 8) == word::<8>(b, n - 8),
        4..8 => word::<4>(a, 0) == word::<4>(b, 0) && word::<4>(a, n - 4) == word::<4>(b, n - 4),
        0..4 => a.iter().zip(b).all(|(x, y)| x == y),
        _ => a == b,
    }
}

/// The `N` bytes of `s` from `at` (which the caller has checked are there), as one word.
#[inline(always)]
fn word<const N: usize>(s: &[u8], at: usize) -> [u8; N] {
    let mut w = [0; N];
    w.copy_from_slice(&s[at..at + N]);
    w
}

/// `word` (four or five bytes: `true`, `null`, `false`) at `i` in `b`, compared without a
/// call to `memcmp`.
#[inline(always)]
pub(super) fn literal_at(b: &[u8], i: usize, word: &[u8]) -> bool {
    let Some(s) = b.get(i..i + word.len()) else {
        return false;
    };
    same(s, word)
}

/// The high bit of each byte of a word.
pub(super) const HIGH: u64 = (u64::MAX / 255) << 7;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length a key has, through the words' overlap: equal bytes are the same, and a
    /// difference in any one byte is found.
    #[test]
    fn same_finds_a_difference_in_any_byte() {
        let text: Vec<u8> = (0..40u8).map(|i| b'a' + i % 26).collect();
        for n in 0..=text.len() {
            let a = &text[..n];
            let copy = a.to_vec();
            assert!(same(a, &copy), "{n}");
            if n < text.len() {
                assert!(!same(a, &text[..n + 1]), "{n}: a longer one");
            }
            for at in 0..n {
                let mut b = a.to_vec();
                b[at] ^= 0x20;
                assert!(!same(a, &b), "{n} at {at}");
            }
        }
    }

    /// A literal is found only whole, and not past the end of the body.
    #[test]
    fn a_literal_is_found_whole() {
        assert!(literal_at(b"[true]", 1, b"true"));
        assert!(literal_at(b"false", 0, b"false"));
        assert!(!literal_at(b"[tru", 1, b"true"));
        assert!(!literal_at(b"fals", 0, b"false"));
        assert!(!literal_at(b"falsy", 0, b"false"));
        assert!(!literal_at(b"nul", 3, b"null"));
    }
}

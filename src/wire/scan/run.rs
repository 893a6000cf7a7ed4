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

/// `a == b`, the first bytes compared before a call to `memcmp`: the keys met are rarely the
/// ones asked for, and often as long.
pub(super) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.first() == b.first() && a == b
}

/// The high bit of each byte of a word.
pub(super) const HIGH: u64 = (u64::MAX / 255) << 7;

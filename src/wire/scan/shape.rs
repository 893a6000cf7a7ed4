//! The shape of a JSON body, for reading the many alike bodies of one stream cheaply.
//!
//! A stream's chunks are mostly one object written again and again with other values: the same
//! keys in the same order and the same spacing around a different text (and, from some
//! providers, a different id or sequence number). A [`Shape`] is one body the scanner accepted,
//! with its string and number values (not its keys) marked as holes. A later body has that shape
//! when it is the same bytes around the holes with a string or a number in each, read as the
//! scanner reads one. Such a body is a plain JSON object exactly as the shape's body was: a value
//! replaced by another of its kind changes no key, no nesting and no repeated key. So the
//! scanner would accept it with the same keys in the same places, and what a reader takes from
//! it differs from what it took from the shape's body only in the holes' values. Checking it costs
//! a comparison of the bytes between the holes and a scan of each hole, where a scan of the body
//! walks every key and value (about a tenth of the instructions on an OpenAI chunk).

use std::ops::Range;

use super::{Scanner, HIGH};

/// One accepted body with its string and number values as holes (see the module docs).
#[derive(Debug)]
pub struct Shape<const K: usize> {
    /// The body the shape was made of.
    bytes: Box<[u8]>,
    /// Its string and number values (not its keys), in order.
    holes: Box<[Range<usize>]>,
    /// Each hole's place in what [`Shape::read`] gives (`u8::MAX`: not kept), so that a hole
    /// read costs one look, however many are kept.
    kept: Box<[u8]>,
}

impl<const K: usize> Shape<K> {
    /// The shape of `body`, when the scanner accepts it ([`super::fields`]). `kept` are spans of
    /// string or number values in it whose spans in each body of this shape the reader wants;
    /// `None` when one of them is not such a value.
    pub fn of(body: &[u8], kept: [Option<Range<usize>>; K]) -> Option<Self> {
        super::fields(body, [])?;
        Self::of_read(body, kept)
    }

    /// [`Shape::of`] a body the scanner has just accepted, with `kept` from that reading: not
    /// read a second time (debug builds check it).
    pub fn of_read(body: &[u8], kept: [Option<Range<usize>>; K]) -> Option<Self> {
        debug_assert!(super::fields(body, []).is_some(), "a body not accepted");
        let holes = holes(body);
        let mut at = vec![u8::MAX; holes.len()];
        for (k, span) in kept.into_iter().enumerate() {
            if let Some(span) = span {
                let n = holes.binary_search_by_key(&span.start, |h| h.start).ok()?;
                // A value asked for twice makes no shape (no reader asks so).
                if holes[n] != span || at[n] != u8::MAX {
                    return None;
                }
                at[n] = u8::try_from(k).ok()?;
            }
        }
        Some(Shape {
            bytes: body.into(),
            holes: holes.into(),
            kept: at.into(),
        })
    }

    /// When `body` has this shape, the spans in it of the values kept (`None` for those
    /// [`Shape::of`] was given none); `None` when it has not.
    ///
    /// The body is compared with the shape's bytes eight at a time up to where they differ;
    /// a difference in a value (or just past one: a longer number) has that value read from
    /// its start, and the comparison goes on after it. A value the same as the shape's is
    /// not read: its bytes are the shape's, which the scanner accepted.
    pub fn read(&self, body: &[u8]) -> Option<[Option<Range<usize>>; K]> {
        let mut scan = Scanner {
            b: body,
            i: 0,
            high: HIGH,
        };
        let shape = &self.bytes[..];
        let mut kept = [const { None }; K];
        // What comes before `t` in the shape and `scan.i` in the body is the same, but for the
        // values read; `holes[h..]` are the values not read nor passed yet.
        let mut t = 0;
        let mut h = 0;
        loop {
            let same = same_prefix(&body[scan.i..], &shape[t..]);
            scan.i += same;
            t += same;
            // The values passed are the shape's own, where they are in the body.
            while let Some(hole) = self.holes.get(h).filter(|hole| hole.end < t) {
                self.keep(
                    &mut kept,
                    h,
                    scan.i - (t - hole.start)..scan.i - (t - hole.end),
                );
                h += 1;
            }
            if t == shape.len() {
                return (scan.i == body.len()).then_some(kept);
            }
            let hole = self.holes.get(h).filter(|hole| hole.start <= t)?;
            scan.i -= t - hole.start;
            let start = scan.i;
            if shape[hole.start] == b'"' {
                if scan.peek()? != b'"' {
                    return None;
                }
                scan.string()?;
            } else {
                scan.number()?;
            }
            self.keep(&mut kept, h, start..scan.i);
            t = hole.end;
            h += 1;
        }
    }

    /// `span` in `kept`, when hole `n` is kept.
    fn keep(&self, kept: &mut [Option<Range<usize>>; K], n: usize, span: Range<usize>) {
        if let Some(k) = kept.get_mut(usize::from(self.kept[n])) {
            *k = Some(span);
        }
    }
}

/// How many bytes `a` and `b` start with alike, compared eight at a time.
fn same_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    for (x, y) in a[..n].chunks_exact(8).zip(b[..n].chunks_exact(8)) {
        let (Ok(x), Ok(y)) = (<[u8; 8]>::try_from(x), <[u8; 8]>::try_from(y)) else {
            break;
        };
        let differ = u64::from_le_bytes(x) ^ u64::from_le_bytes(y);
        if differ != 0 {
            return i + differ.trailing_zeros() as usize / 8;
        }
        i += 8;
    }
    i + a[i..n]
        .iter()
        .zip(&b[i..n])
        .take_while(|(x, y)| x == y)
        .count()
}

/// The spans of the string and number values (not the keys) of `body`, a body the scanner
/// accepted, in order.
fn holes(body: &[u8]) -> Vec<Range<usize>> {
    let mut holes = Vec::new();
    // One bit for each open container, the innermost lowest: set for an object. The scanner
    // accepts no more than `MAX_DEPTH` (100) nested in the outermost object.
    let mut objects: u128 = 0;
    // Whether a string here is a key: after `{`, and after `,` in an object.
    let mut key = false;
    let mut i = 0;
    while let Some(&c) = body.get(i) {
        match c {
            b'{' => {
                objects = objects << 1 | 1;
                key = true;
            }
            b'[' => {
                objects <<= 1;
                key = false;
            }
            b'}' | b']' => objects >>= 1,
            b',' => key = objects & 1 == 1,
            b':' => key = false,
            b'"' => {
                let end = string_end(body, i);
                if !key {
                    holes.push(i..end);
                }
                i = end;
                continue;
            }
            b'-' | b'0'..=b'9' => {
                let len = body[i..]
                    .iter()
                    .position(|c| !matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .unwrap_or(body.len() - i);
                holes.push(i..i + len);
                i += len;
                continue;
            }
            // Whitespace, and the letters of `true`, `false` and `null`.
            _ => {}
        }
        i += 1;
    }
    holes
}

/// The end (past its closing quote) of the string whose opening quote is at `at`.
fn string_end(body: &[u8], at: usize) -> usize {
    let mut i = at + 1;
    while let Some(n) = memchr::memchr2(b'"', b'\\', &body[i.min(body.len())..]) {
        i += n;
        if body[i] == b'"' {
            return i + 1;
        }
        i += 2; // an escape: the byte after the backslash is not a closing quote
    }
    body.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(body: &str, value: &str) -> Option<Range<usize>> {
        body.find(value).map(|at| at..at + value.len())
    }

    #[test]
    fn same_prefixes() {
        let a = b"0123456789abcdefXYZ";
        for n in 0..a.len() {
            let mut b = a.to_vec();
            b[n] = b'!';
            assert_eq!(same_prefix(a, &b), n);
            assert_eq!(same_prefix(&a[..n], a), n);
        }
        assert_eq!(same_prefix(a, a), a.len());
    }

    #[test]
    fn holes_are_the_values_not_the_keys() {
        let body = r#"{"a":"x","b":[1,-2.5e3,"y\"z",{"c":null,"d":true}],"e":{"f":"g"}}"#;
        let holes: Vec<_> = holes(body.as_bytes())
            .into_iter()
            .map(|h| &body[h])
            .collect();
        assert_eq!(holes, [r#""x""#, "1", "-2.5e3", r#""y\"z""#, r#""g""#]);
    }

    #[test]
    fn a_body_has_the_shape_when_only_its_values_differ() {
        let first = r#"{"id":"c-1","n":1,"choices":[{"delta":{"content":"Hi"},"finish":null}]}"#;
        let shape = Shape::of(first.as_bytes(), [span(first, r#""Hi""#)]).unwrap();
        let [text] = shape.read(first.as_bytes()).unwrap();
        assert_eq!(text, span(first, r#""Hi""#));

        let later = r#"{"id":"c-22","n":-3.5,"choices":[{"delta":{"content":" th\"ere é"},"finish":null}]}"#;
        let [text] = shape.read(later.as_bytes()).unwrap();
        assert_eq!(&later[text.unwrap()], r#"" th\"ere é""#);

        // A value longer or shorter than the shape's, first or last.
        for (n, text) in [("12345678901", "Hi"), ("1", "H"), ("0", "")] {
            let body = first.replace(":1,", &format!(":{n},")).replace("Hi", text);
            let [kept] = shape.read(body.as_bytes()).unwrap();
            assert_eq!(&body[kept.unwrap()], format!("\"{text}\""));
        }
        for other in [
            // another key, another spacing, another kind of value, another structure
            r#"{"id":"c-1","n":1,"choices":[{"delta":{"content":"Hi"},"finish":"stop"}]}"#,
            r#"{"id":"c-1","n":1,"choices":[{"delta":{"contents":"Hi"},"finish":null}]}"#,
            r#"{"id":"c-1", "n":1,"choices":[{"delta":{"content":"Hi"},"finish":null}]}"#,
            r#"{"id":1,"n":1,"choices":[{"delta":{"content":"Hi"},"finish":null}]}"#,
            r#"{"id":"c-1","n":"1","choices":[{"delta":{"content":"Hi"},"finish":null}]}"#,
            r#"{"id":"c-1","n":1,"choices":[{"delta":{"content":"Hi"},"finish":null}]} "#,
            r#"{"id":"c-1","n":1,"choices":[{"delta":{"content":"Hi"},"finish":null}]"#,
            // values the scanner refuses: a control character, a bad escape, not UTF-8, a
            // bad number
            "{\"id\":\"c\u{1}\",\"n\":1,\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish\":null}]}",
            r#"{"id":"c\x","n":1,"choices":[{"delta":{"content":"Hi"},"finish":null}]}"#,
            r#"{"id":"c-1","n":01,"choices":[{"delta":{"content":"Hi"},"finish":null}]}"#,
            r#"{"id":"c-1","n":1.,"choices":[{"delta":{"content":"Hi"},"finish":null}]}"#,
            r#"{"id":"c-1","n":1,"choices":[{"delta":{"content":"Hi},"finish":null}]}"#,
        ] {
            assert!(shape.read(other.as_bytes()).is_none(), "{other}");
        }
        // A text not UTF-8 (an é cut short).
        let mut not_utf8 = first.as_bytes().to_vec();
        let at = first.find("Hi").unwrap();
        not_utf8.splice(at..at + 2, [b'H', 0xc3, b'!']);
        assert!(shape.read(&not_utf8).is_none());
    }

    #[test]
    fn only_accepted_bodies_and_their_values_make_shapes() {
        assert!(Shape::of(b"{\"a\":1,}", []).is_none());
        assert!(Shape::of(b"[1]", []).is_none());
        let body = r#"{"a":"x","b":{"c":2}}"#;
        assert!(
            Shape::of(body.as_bytes(), [span(body, "\"a\"")]).is_none(),
            "a key"
        );
        assert!(Shape::of(body.as_bytes(), [span(body, r#"{"c":2}"#)]).is_none());
        let shape = Shape::of(body.as_bytes(), [span(body, "2"), None]).unwrap();
        let later = r#"{"a":"yy","b":{"c":30}}"#;
        let [thirty, none] = shape.read(later.as_bytes()).unwrap();
        assert_eq!((thirty, none), (span(later, "30"), None));
    }
}

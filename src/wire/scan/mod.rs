//! A JSON scanner for the request path: it checks a body is JSON and finds the values of a few
//! top-level keys, building nothing.
//!
//! serde_json reading a body into a struct of skipped and borrowed fields costs ~16
//! instructions a byte (each key matched through a visitor, each skipped value walked by
//! the generic deserializer); this costs a few on long strings (skipped eight bytes at a
//! time) and about ten on bodies dense with short keys and values, most of it a token's own
//! reading (a string, a number or a literal is read without a call).
//!
//! It answers only for plain bodies and says `None` for anything else: not JSON, not an
//! object, not UTF-8, a top-level key written with escapes, one of the keys asked for twice,
//! nesting deeper than [`MAX_DEPTH`]. The caller then reads the body with serde_json, which
//! either accepts it or says why not; so what the gateway accepts and the errors it gives are
//! serde_json's, and this is only a faster way to the same answer for the bodies clients and
//! providers send. `fuzz/fuzz_targets/json_scan.rs` checks that every body this accepts,
//! serde_json accepts, with the same values for the same keys.

use std::borrow::Cow;
use std::ops::Range;

mod run;
mod shape;
use run::{literal_at, plain_run, same, HIGH};
pub use shape::Shape;

/// Containers nested deeper than this are left to serde_json (whose own limit is 127).
pub const MAX_DEPTH: usize = 100;

/// The spans in `body` of the values of `keys`, for a plain JSON object `body` (see the module
/// docs); `None` when `body` is not one.
pub fn fields<const N: usize>(body: &[u8], keys: [&str; N]) -> Option<[Option<Range<usize>>; N]> {
    read(body, keys, &mut |_, _| Some(false))
}

/// [`fields`] of the object `body[span]`, where `body` was accepted by [`fields`] (or
/// [`fields_and_items`]) and `span` is one of its answers: the UTF-8 and the JSON of it were
/// checked then. `None` when that value is not a plain object.
pub fn fields_in<const N: usize>(
    body: &[u8],
    span: Range<usize>,
    keys: [&str; N],
) -> Option<[Option<Range<usize>>; N]> {
    let mut scan = Scanner {
        b: &body[..span.end],
        i: span.start,
        high: 0,
    };
    scan.object(0, keys, &mut |_, _| Some(false))
}

/// [`fields`], and, in the same pass, for the value of `keys[list]`, an array of objects, the
/// spans in `body` of the values of `item_keys` in each item; then `item` says whether to go
/// on. Also the number of items. `None` as [`fields`] says it, and when that value is not an
/// array of objects or `item` said to stop.
pub fn fields_and_items<const N: usize, const M: usize>(
    body: &[u8],
    keys: [&str; N],
    list: usize,
    item_keys: [&str; M],
    item: impl FnMut([Option<Range<usize>>; M]) -> bool,
) -> Option<([Option<Range<usize>>; N], usize)> {
    let (found, count, _) =
        fields_items_and_nested(body, keys, (list, item_keys), item, (usize::MAX, []))?;
    Some((found, count))
}

/// [`fields_and_items`], and, in the same pass, when the value of `keys[nested]` is a plain
/// object, the spans in `body` of the values of `inner_keys` in it (as [`fields_in`] would
/// find them, without reading the value again; `None` when it is not one).
pub fn fields_items_and_nested<const N: usize, const M: usize, const L: usize>(
    body: &[u8],
    keys: [&str; N],
    (list, item_keys): (usize, [&str; M]),
    mut item: impl FnMut(Spans<M>) -> bool,
    (nested, inner_keys): (usize, [&str; L]),
) -> Option<(Spans<N>, usize, Option<Spans<L>>)> {
    let mut count = 0;
    let mut inner = None;
    let found = read(body, keys, &mut |k, scan| {
        if k == nested {
            inner = scan.plain_object(inner_keys);
            return Some(inner.is_some());
        }
        if k != list {
            return Some(false);
        }
        scan.array(1, &mut |scan| {
            count += 1;
            let found = scan.object(2, item_keys, &mut |_, _| Some(false))?;
            item(found).then_some(())
        })?;
        Some(true)
    })?;
    Some((found, count, inner))
}

/// The spans of the values of `N` keys, each `None` when its key is absent.
pub type Spans<const N: usize> = [Option<Range<usize>>; N];

/// The spans in `body` of the values of `inner_keys` in one of the values of
/// [`fields_and_nested`], and which key's value that is.
pub type Nested<const M: usize> = (usize, Spans<M>);

/// [`fields`], and, in the same pass, for the first value of one of `keys[nested]` that is a
/// plain object, the spans in `body` of the values of `inner_keys` in it (as [`fields_in`]
/// would find them, without reading the value again). `None` as [`fields`] says it; no
/// [`Nested`] when no such value is a plain object.
pub fn fields_and_nested<const N: usize, const M: usize>(
    body: &[u8],
    keys: [&str; N],
    nested: &[usize],
    inner_keys: [&str; M],
) -> Option<(Spans<N>, Option<Nested<M>>)> {
    let mut inner = None;
    let found = read(body, keys, &mut |k, scan| {
        if inner.is_some() || !nested.contains(&k) {
            return Some(false);
        }
        inner = scan.plain_object(inner_keys).map(|spans| (k, spans));
        Some(inner.is_some())
    })?;
    Some((found, inner))
}

/// [`fields`], and, in the same pass, each value of `keys` offered first to `visit` (at its
/// first byte, with the key's place in `keys`), which may read it through the [`Cursor`] and
/// says whether it did. A visitor that fails (`None`) fails the read: the caller then reads
/// the body with serde_json.
pub fn fields_visiting<const N: usize>(
    body: &[u8],
    keys: [&str; N],
    mut visit: impl FnMut(usize, &mut Cursor<'_, '_>) -> Option<bool>,
) -> Option<Spans<N>> {
    read(body, keys, &mut |k, scan| {
        visit(k, &mut Cursor { scan, depth: 0 })
    })
}

/// A value met by [`fields_visiting`], at its first byte, for its visitor to read.
pub struct Cursor<'s, 'b> {
    scan: &'s mut Scanner<'b>,
    /// The depth of the object it is a value of (the body's own: 0), as [`Scanner::object`]
    /// counts it.
    depth: usize,
}

impl Cursor<'_, '_> {
    /// The value's first byte.
    pub fn peek(&self) -> Option<u8> {
        self.scan.peek()
    }

    /// The array of plain objects here, read: in each item, the values of `keys` are offered
    /// to `visit` first (as [`fields_visiting`] offers them), then their spans are given to
    /// `item`, which says whether to go on. `None` when the value is not such an array, a
    /// visitor failed or `item` said to stop.
    pub fn items<const M: usize>(
        &mut self,
        keys: [&str; M],
        visit: &mut dyn FnMut(usize, &mut Cursor<'_, '_>) -> Option<bool>,
        item: &mut dyn FnMut(Spans<M>) -> bool,
    ) -> Option<()> {
        let depth = self.depth;
        self.scan.array(depth + 1, &mut |scan| {
            let found = scan.object(depth + 2, keys, &mut |k, scan| {
                visit(
                    k,
                    &mut Cursor {
                        scan,
                        depth: depth + 2,
                    },
                )
            })?;
            item(found).then_some(())
        })
    }

    /// The spans of the values of `keys` in the object here, when it is a plain one (see the
    /// module docs), read; else `None`, nothing read.
    pub fn object<const M: usize>(&mut self, keys: [&str; M]) -> Option<Spans<M>> {
        if self.scan.peek() != Some(b'{') {
            return None;
        }
        let start = self.scan.i;
        let spans = self
            .scan
            .object(self.depth + 1, keys, &mut |_, _| Some(false));
        if spans.is_none() {
            self.scan.i = start;
        }
        spans
    }
}

/// `span`, unless the value there is `null` (which serde_json reads as an absent `Option`).
pub fn not_null(body: &[u8], span: Option<Range<usize>>) -> Option<Range<usize>> {
    span.filter(|r| &body[r.clone()] != b"null")
}

/// The `Option<bool>` serde_json reads at `span` (absent or `null`: `None`), or `None` when the
/// value there is not a boolean (serde_json refuses it).
pub fn flag(body: &[u8], span: Option<Range<usize>>) -> Option<Option<bool>> {
    match span.map(|r| &body[r]) {
        None | Some(b"null") => Some(None),
        Some(b"true") => Some(Some(true)),
        Some(b"false") => Some(Some(false)),
        Some(_) => None,
    }
}

/// The text of the string value at `span` of a body the scanner accepted: borrowed when it has
/// no escapes, decoded by serde_json when it has; `None` when the value is not a string (or
/// holds an escape no string can, a lone surrogate).
pub fn text(body: &[u8], span: Range<usize>) -> Option<Cow<'_, str>> {
    let value = &body[span];
    let inner = value.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    if inner.contains(&b'\\') {
        return serde_json::from_slice::<String>(value).ok().map(Cow::Owned);
    }
    std::str::from_utf8(inner).ok().map(Cow::Borrowed)
}

/// A JSON number that is a whole number in `u64` (`None` for any other, a fraction or an
/// exponent included: serde_json refuses those for a `u64` too).
pub fn whole_number(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    value.iter().try_fold(0u64, |n, &d| {
        let d = d.checked_sub(b'0').filter(|d| *d < 10)?;
        n.checked_mul(10)?.checked_add(u64::from(d))
    })
}

fn read<const N: usize>(
    body: &[u8],
    keys: [&str; N],
    hook: &mut dyn FnMut(usize, &mut Scanner<'_>) -> Option<bool>,
) -> Option<[Option<Range<usize>>; N]> {
    let mut scan = Scanner {
        b: body,
        i: 0,
        high: HIGH,
    };
    scan.ws();
    let found = scan.object(0, keys, hook)?;
    scan.ws();
    (scan.i == body.len()).then_some(found)
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
    /// [`HIGH`] while the body is not known to be UTF-8: a string stops at a byte past ASCII
    /// (no such byte is JSON outside a string), and the first one has the rest of the body
    /// checked, once; 0 from then on. A body of ASCII, most of them, is not read twice.
    high: u64,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// Whitespace at `i`, skipped. Bodies are mostly written without any: a byte past the
    /// space (every token's first one) ends it at one test.
    #[inline(always)]
    fn ws(&mut self) {
        while let Some(&c) = self.b.get(self.i) {
            if c > b' ' || !matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                return;
            }
            self.i += 1;
        }
    }

    /// `c` next, taken.
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// One value at `i`, which is not whitespace; `depth` containers enclose it. Inlined into
    /// each caller, a string, a number or a literal is read without a call: most values are
    /// those (a call's saving and restoring of registers cost more than a short string's read).
    #[inline(always)]
    fn value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'{' | b'[' => self.container(depth),
            b'"' => self.string().map(drop),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// The object or array at `i`, skipped (`depth` containers enclose it): read as
    /// [`Scanner::object`] and [`Scanner::array`] read what they are given nothing to find in,
    /// but in one loop, the containers open within it kept as bits (1: an object), not a call
    /// for each container and each array item. Agents' bodies are mostly such values (their
    /// history, tools' schemas, a Responses stream's echoed settings): a call each cost ~8 %
    /// of an agent's turn (`bench/instructions` with `BODY`).
    #[inline(never)]
    fn container(&mut self, depth: usize) -> Option<()> {
        let mut objects: u128 = 0;
        // Containers open within the one at `i` (it included); never more than `MAX_DEPTH`.
        let mut open = 0;
        loop {
            // A value's first byte.
            match self.peek()? {
                c @ (b'{' | b'[') => {
                    if depth + open + 1 > MAX_DEPTH {
                        return None;
                    }
                    self.i += 1;
                    self.ws();
                    let object = c == b'{';
                    if self.eat(if object { b'}' } else { b']' }).is_none() {
                        objects = objects << 1 | u128::from(object);
                        open += 1;
                        if object {
                            self.key()?;
                        }
                        continue;
                    }
                }
                b'"' => {
                    self.string()?;
                }
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                b'-' | b'0'..=b'9' => self.number()?,
                _ => return None,
            }
            // A value read: close what it ends, up to the next item.
            loop {
                if open == 0 {
                    return Some(());
                }
                let object = objects & 1 == 1;
                if self.another(if object { b'}' } else { b']' })? {
                    if object {
                        self.key()?;
                    }
                    break;
                }
                objects >>= 1;
                open -= 1;
            }
        }
    }

    /// An object's key at `i` and the colon after it, with the whitespace after each: the key's
    /// span between its quotes (not sliced here: a key skipped costs no bounds check), and
    /// whether it holds an escape.
    #[inline(always)]
    fn key(&mut self) -> Option<(Range<usize>, bool)> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.i + 1;
        let escaped = self.string()?;
        let key = start..self.i - 1;
        self.ws();
        self.eat(b':')?;
        self.ws();
        Some((key, escaped))
    }

    #[inline(always)]
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        literal_at(self.b, self.i, word).then(|| self.i += word.len())
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, as RFC 8259 and serde_json have it.
    fn number(&mut self) -> Option<()> {
        let _ = self.eat(b'-');
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.eat(b'.').is_some() {
            self.some_digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            self.some_digits()?;
        }
        Some(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
    }

    fn some_digits(&mut self) -> Option<()> {
        let start = self.i;
        self.digits();
        (self.i > start).then_some(())
    }

    /// A string at `i` (its opening quote); whether it has escapes. No control character
    /// unescaped; the escapes JSON has (a `\u` with any four hex digits, as serde_json skips
    /// them). Plain bytes are skipped in runs ([`plain_run`]).
    ///
    /// Inlined where a key or a value is read: the run up to the closing quote, for a
    /// string with nothing else special in them (most strings: keys, short values); anything
    /// else (an escape, a byte past ASCII, a string ending within eight bytes of the body's
    /// end) goes on in [`Scanner::string_from`].
    #[inline(always)]
    fn string(&mut self) -> Option<bool> {
        let i = plain_run(self.b, self.i + 1, self.high);
        if self.b.get(i) == Some(&b'"') {
            self.i = i + 1;
            return Some(false);
        }
        self.string_from(i)
    }

    /// The rest of a string from `i`, a byte within it (see [`Scanner::string`]).
    #[inline(never)]
    fn string_from(&mut self, mut i: usize) -> Option<bool> {
        // The position and mask in locals: kept in registers, not stored back at each word.
        let b = self.b;
        let mut high = self.high;
        let mut escaped = false;
        loop {
            i = plain_run(b, i, high);
            match *b.get(i)? {
                b'"' => {
                    self.i = i + 1;
                    self.high = high;
                    return Some(escaped);
                }
                b'\\' => {
                    escaped = true;
                    match *b.get(i + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                        b'u' => {
                            let hex = b.get(i + 2..i + 6)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            i += 6;
                        }
                        _ => return None,
                    }
                }
                0..0x20 => return None,
                0x80.. if high != 0 => {
                    // Everything before it is ASCII.
                    std::str::from_utf8(&b[i..]).ok()?;
                    high = 0;
                }
                _ => i += 1,
            }
        }
    }

    /// The spans of the values of `keys` in the object at `i`, when it is a plain one (see
    /// [`Scanner::object`]), read; else `None`, nothing read (the value is then read as any
    /// other: a key with escapes, say, is only not plain).
    fn plain_object<const N: usize>(&mut self, keys: [&str; N]) -> Option<Spans<N>> {
        if self.peek() != Some(b'{') {
            return None;
        }
        let start = self.i;
        let spans = self.object(1, keys, &mut |_, _| Some(false));
        if spans.is_none() {
            self.i = start;
        }
        spans
    }

    /// An array at `i`; `item` reads each item (at its first byte).
    fn array(&mut self, depth: usize, item: &mut dyn FnMut(&mut Self) -> Option<()>) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.eat(b'[')?;
        self.ws();
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            item(self)?;
            if !self.another(b']')? {
                return Some(());
            }
        }
    }

    /// After an item: a comma (`true`: another item follows) or `close` (`false`), taken with
    /// the whitespace around it.
    fn another(&mut self, close: u8) -> Option<bool> {
        self.ws();
        let c = self.peek()?;
        self.i += 1;
        if c == b',' {
            self.ws();
            Some(true)
        } else {
            (c == close).then_some(false)
        }
    }

    /// An object at `i`, and the spans of the values of `keys` in it (when there are keys to
    /// find, a key with escapes is `None`). `hook` is given each of those values first, at its
    /// first byte, and says whether it read it.
    ///
    /// Inlined: the array of spans is made here; the reading is [`Scanner::object_into`], one
    /// copy for every number of keys.
    #[inline(always)]
    fn object<const N: usize>(
        &mut self,
        depth: usize,
        keys: [&str; N],
        hook: &mut dyn FnMut(usize, &mut Self) -> Option<bool>,
    ) -> Option<[Option<Range<usize>>; N]> {
        let mut found = [const { None }; N];
        self.object_into(depth, &keys, &mut found, hook)?;
        Some(found)
    }

    /// [`Scanner::object`], the span of the value of `keys[k]` put in `found[k]` (as long as
    /// `keys`). Not generic: a copy for each number of keys (five on a chat request's path,
    /// ~300 instructions of code each) made a request run that much more distinct code, and
    /// code is what a request woken after an idle spell fetches cold (`bench/instructions`
    /// with `FOOTPRINT=1`).
    #[inline(never)]
    fn object_into(
        &mut self,
        depth: usize,
        keys: &[&str],
        found: &mut [Option<Range<usize>>],
        hook: &mut dyn FnMut(usize, &mut Self) -> Option<bool>,
    ) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.eat(b'{')?;
        self.ws();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let (key, escaped) = self.key()?;
            let key = &self.b[key];
            let start = self.i;
            let k = if keys.is_empty() {
                None
            } else {
                if escaped {
                    return None;
                }
                keys.iter().position(|k| same(k.as_bytes(), key))
            };
            match k {
                Some(k) => {
                    if !hook(k, self)? {
                        self.value(depth)?;
                    }
                    if found.get_mut(k)?.replace(start..self.i).is_some() {
                        return None;
                    }
                }
                None => self.value(depth)?,
            }
            if !self.another(b'}')? {
                return Some(());
            }
        }
    }
}

#[cfg(test)]
mod tests;

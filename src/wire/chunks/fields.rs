//! Readings of a stream event's fields by the scanner, each as serde_json reads the field's
//! type (an `Option` of a number, a text, a raw value or a small object): `None` when the value
//! does not read as that type, for the caller to leave the event to serde_json, which then
//! reads it or says no.

use std::borrow::Cow;
use std::ops::Range;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::wire::scan;

/// A value's JSON text as it came: serde_json's `RawValue` of it, or the scanner's span. Bytes,
/// not `str`: what reads it reads them as JSON (the scanner, or serde_json, which checks the
/// UTF-8 of what it reads), and the scanner's span is not checked as UTF-8 a second time.
#[derive(Clone, Copy, PartialEq)]
pub(super) struct Raw<'a>(pub(super) &'a [u8]);

impl<'de: 'a, 'a> Deserialize<'de> for Raw<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <&'de RawValue>::deserialize(d).map(|raw| Raw(raw.get().as_bytes()))
    }
}

impl std::fmt::Debug for Raw<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Raw")
            .field(&String::from_utf8_lossy(self.0))
            .finish()
    }
}

impl<'a> Raw<'a> {
    /// The fields of this object value that are `keys`, by the scanner (the value is JSON,
    /// checked by whichever read it).
    pub(super) fn fields<const N: usize>(
        self,
        keys: [&str; N],
    ) -> Option<[Option<Range<usize>>; N]> {
        scan::fields_in(self.0, 0..self.0.len(), keys)
    }
}

/// The value at `span` of an `Option<u64>` field as serde_json reads it (absent or `null`:
/// `None`); `None` when it does not read as one.
pub(in crate::wire) fn number(data: &[u8], span: Option<Range<usize>>) -> Option<Option<u64>> {
    match scan::not_null(data, span) {
        None => Some(None),
        Some(span) => scan::whole_number(&data[span]).map(Some),
    }
}

/// As [`number`], for an `Option<u32>` field.
pub(super) fn index(data: &[u8], span: Option<Range<usize>>) -> Option<Option<u32>> {
    number(data, span)?.map(u32::try_from).transpose().ok()
}

/// As [`number`], for an `Option<Cow<str>>` field.
pub(super) fn text(data: &[u8], span: Option<Range<usize>>) -> Option<Option<Cow<'_, str>>> {
    match scan::not_null(data, span) {
        None => Some(None),
        Some(span) => scan::text(data, span).map(Some),
    }
}

/// As [`number`], for an `Option<String>` field.
pub(super) fn owned_text(data: &[u8], span: Option<Range<usize>>) -> Option<Option<String>> {
    Some(text(data, span)?.map(Cow::into_owned))
}

/// As [`number`], for an `Option<Raw>` field.
pub(super) fn raw(data: &[u8], span: Option<Range<usize>>) -> Option<Option<Raw<'_>>> {
    Some(scan::not_null(data, span).map(|span| Raw(&data[span])))
}

/// The value at `span` of a `u64` field with a default as serde_json reads it (absent: 0;
/// `null` is no number); `None` when it does not read as one.
pub(in crate::wire) fn count(data: &[u8], span: Option<Range<usize>>) -> Option<u64> {
    match span {
        None => Some(0),
        Some(span) => scan::whole_number(&data[span]),
    }
}

/// A small object the scanner reads as serde_json reads it into `Self`.
pub(in crate::wire) trait Scanned: Sized {
    /// The object at `span` of a body the scanner accepted; `None` when it does not read as
    /// `Self` (serde_json then says why, or reads what is not plain).
    fn scan(data: &[u8], span: Range<usize>) -> Option<Self>;
}

/// As [`number`], for an `Option<T>` field that the scanner reads.
pub(in crate::wire) fn scanned<T: Scanned>(
    data: &[u8],
    span: Option<Range<usize>>,
) -> Option<Option<T>> {
    match scan::not_null(data, span) {
        None => Some(None),
        Some(span) => T::scan(data, span).map(Some),
    }
}

/// As [`number`], for an `Option<T>` field that serde_json reads (a small object).
pub(super) fn nested<'a, T: Deserialize<'a>>(
    data: &'a [u8],
    span: Option<Range<usize>>,
) -> Option<Option<T>> {
    match scan::not_null(data, span) {
        None => Some(None),
        Some(span) => serde_json::from_slice(&data[span]).ok().map(Some),
    }
}

//! The few protobuf encodings an OTLP trace export needs, written straight into bytes (no
//! message structs, no allocation per attribute): varints, fixed-width numbers,
//! length-delimited fields, nested messages written in place ([`open`] and [`close`]: no
//! buffer per message, no copy), and the common `KeyValue` attribute. The field numbers are the
//! OpenTelemetry protocol's (`opentelemetry/proto/*.proto`, as `opentelemetry-proto` has
//! them); the trace tests decode what is written here with those published definitions.

/// Wire types.
const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;
const FIXED32: u32 = 5;

pub(super) fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(super) fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn key(out: &mut Vec<u8>, field: u32, wire: u32) {
    varint(out, u64::from(field << 3 | wire));
}

/// A length-delimited field: bytes, a string, or an encoded message.
pub(super) fn bytes(out: &mut Vec<u8>, field: u32, value: &[u8]) {
    key(out, field, LEN);
    varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

/// Start a nested message (or any length-delimited field) as field `field`, to be written in
/// place after it: its key and room for a two-byte length. [`close`] it with what this returns.
pub(super) fn open(out: &mut Vec<u8>, field: u32) -> usize {
    key(out, field, LEN);
    out.extend_from_slice(&[0, 0]);
    out.len()
}

/// End the field [`open`] started at `start`: its length written in the canonical varint,
/// the message moved when that takes other than two bytes (under 128 bytes, or 16 KiB and
/// more: rare for a span, its events and status).
pub(super) fn close(out: &mut Vec<u8>, start: usize) {
    let len = out.len() - start;
    if varint_len(len as u64) == 2 {
        out[start - 2] = (len as u8) | 0x80;
        out[start - 1] = (len >> 7) as u8;
        return;
    }
    let mut prefix = Vec::with_capacity(10);
    varint(&mut prefix, len as u64);
    out.splice(start - 2..start, prefix);
}

/// A string field, left out when empty (proto3's default).
pub(super) fn string(out: &mut Vec<u8>, field: u32, value: &str) {
    if !value.is_empty() {
        bytes(out, field, value.as_bytes());
    }
}

pub(super) fn uint(out: &mut Vec<u8>, field: u32, value: u64) {
    if value != 0 {
        key(out, field, VARINT);
        varint(out, value);
    }
}

pub(super) fn fixed64(out: &mut Vec<u8>, field: u32, value: u64) {
    key(out, field, FIXED64);
    out.extend_from_slice(&value.to_le_bytes());
}

pub(super) fn fixed32(out: &mut Vec<u8>, field: u32, value: u32) {
    key(out, field, FIXED32);
    out.extend_from_slice(&value.to_le_bytes());
}

/// An attribute value (`AnyValue`'s one-of).
#[derive(Debug, Clone, Copy)]
pub(super) enum Value<'a> {
    Str(&'a str),
    Int(i64),
    Bool(bool),
    Double(f64),
}

impl Value<'_> {
    /// The encoded `AnyValue` message's length.
    fn len(&self) -> usize {
        1 + match self {
            Value::Str(s) => varint_len(s.len() as u64) + s.len(),
            Value::Int(i) => varint_len(*i as u64),
            Value::Bool(_) => 1,
            Value::Double(_) => 8,
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        match *self {
            // AnyValue: string_value = 1, bool_value = 2, int_value = 3, double_value = 4.
            Value::Str(s) => bytes(out, 1, s.as_bytes()),
            Value::Bool(b) => {
                key(out, 2, VARINT);
                out.push(u8::from(b));
            }
            Value::Int(i) => {
                key(out, 3, VARINT);
                // int64: two's complement as a 64-bit varint.
                varint(out, i as u64);
            }
            Value::Double(d) => {
                key(out, 4, FIXED64);
                out.extend_from_slice(&d.to_le_bytes());
            }
        }
    }
}

/// A `KeyValue` (key = 1, value = 2) as field `field` of the enclosing message.
pub(super) fn attribute(out: &mut Vec<u8>, field: u32, name: &str, value: Value<'_>) {
    let value_len = value.len();
    let len = 1
        + varint_len(name.len() as u64)
        + name.len()
        + 1
        + varint_len(value_len as u64)
        + value_len;
    out.reserve(len + 4);
    key(out, field, LEN);
    varint(out, len as u64);
    bytes(out, 1, name.as_bytes());
    key(out, 2, LEN);
    varint(out, value_len as u64);
    value.write(out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use opentelemetry_proto::tonic::common::v1::KeyValue;
    use prost::Message;

    #[test]
    fn attributes_decode_with_the_published_definitions() {
        for (value, want) in [
            (
                Value::Str("chat gpt-4o"),
                Any::StringValue("chat gpt-4o".into()),
            ),
            (Value::Str(""), Any::StringValue(String::new())),
            (Value::Int(503), Any::IntValue(503)),
            (Value::Int(-2), Any::IntValue(-2)),
            (Value::Int(i64::MAX), Any::IntValue(i64::MAX)),
            (Value::Bool(true), Any::BoolValue(true)),
            (Value::Bool(false), Any::BoolValue(false)),
            (Value::Double(12.5), Any::DoubleValue(12.5)),
        ] {
            let mut out = Vec::new();
            attribute(&mut out, 9, "k", value);
            // Field 9 of an enclosing message: strip its key and length to get the KeyValue.
            let (body, rest) = {
                let mut slice = &out[1..];
                let len = prost::encoding::decode_varint(&mut slice).unwrap_or(0) as usize;
                (slice[..len].to_vec(), slice.len() - len)
            };
            assert_eq!(rest, 0);
            let kv = KeyValue::decode(body.as_slice()).unwrap_or_default();
            assert_eq!(kv.key, "k");
            assert_eq!(kv.value.and_then(|v| v.value), Some(want), "{value:?}");
        }
    }

    #[test]
    fn messages_written_in_place_have_canonical_lengths() {
        use opentelemetry_proto::tonic::common::v1::AnyValue;
        for n in [
            0, 1, 100, 125, 126, 127, 200, 16_000, 16_381, 16_382, 20_000, 3_000_000,
        ] {
            let text = "x".repeat(n);
            // AnyValue { string_value = 1 } as field 2 of an enclosing message, in place.
            let mut out = vec![7u8];
            let at = open(&mut out, 2);
            string(&mut out, 1, &text);
            close(&mut out, at);
            let mut want = vec![7u8];
            let mut inner = Vec::new();
            string(&mut inner, 1, &text);
            bytes(&mut want, 2, &inner);
            assert_eq!(out, want, "{n}");
            let mut slice = &out[2..];
            let len = prost::encoding::decode_varint(&mut slice).unwrap_or(0) as usize;
            let v = AnyValue::decode(&slice[..len]).unwrap_or_default();
            assert_eq!(v.value, (n > 0).then_some(Any::StringValue(text)), "{n}");
        }
    }

    #[test]
    fn varint_lengths_match_what_is_written() {
        for v in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut out = Vec::new();
            varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v), "{v}");
        }
    }
}

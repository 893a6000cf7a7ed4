//! A JSON object read member by member with the values left as they came, for the clouds'
//! body rewrites (`bedrock`, `vertex`): what they do not change is copied byte for byte.

use std::borrow::Cow;

use serde::de::{MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// A JSON object's members in order, values unparsed.
pub(super) struct Fields<'a>(pub(super) Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de>, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<Cow<'de, str>, &'de RawValue>()? {
                    out.push((k, v));
                }
                Ok(Fields(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Write `"key":value` (after a comma unless `out` ends the object's opening brace).
pub(super) fn member(out: &mut Vec<u8>, key: &str, value: &[u8]) {
    if out.last() != Some(&b'{') {
        out.push(b',');
    }
    // JSON-escaped again: the same text as it came for any key written without needless escapes.
    let _ = serde_json::to_writer(&mut *out, key);
    out.push(b':');
    out.extend_from_slice(value);
}

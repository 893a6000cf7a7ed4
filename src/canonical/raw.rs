//! Shared parsing and writing helpers: top-level fields as raw JSON, string-or-array content,
//! `data:` URLs, tool arguments between JSON text and JSON object, unmodelled fields.

use std::borrow::Cow;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::error::TranslateError;
use super::types::{CacheControl, Extra, Image, RawJson};
use super::Dialect;

/// A JSON object's members, in order, each value left unparsed: a request is split once, each
/// known field parsed by its own type and the unknown ones kept as they came.
#[derive(Debug, Default)]
pub(crate) struct Fields<'a>(pub(crate) Vec<(Cow<'a, str>, &'a RawValue)>);

/// An object key, borrowed when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FieldsVisitor;
        impl<'de> Visitor<'de> for FieldsVisitor {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some((Key(k), v)) = map.next_entry::<Key<'de>, &'de RawValue>()? {
                    out.push((k, v));
                }
                Ok(Fields(out))
            }
        }
        deserializer.deserialize_map(FieldsVisitor)
    }
}

/// Splits a JSON object body into its members.
pub(crate) fn fields(body: &[u8]) -> Result<Fields<'_>, TranslateError> {
    Ok(serde_json::from_slice(body)?)
}

/// Parses one raw member with its type, naming the member in the error.
pub(crate) fn parse<'a, T: Deserialize<'a>>(
    name: &str,
    raw: &'a RawValue,
) -> Result<T, TranslateError> {
    serde_json::from_str(raw.get()).map_err(|e| TranslateError::invalid(format!("`{name}`: {e}")))
}

/// What a raw value is, by its first character.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Null,
    String,
    Array,
    Object,
    Other,
}

/// The shape of a raw value.
pub(crate) fn shape(raw: &RawValue) -> Shape {
    match raw.get().trim_start().as_bytes().first() {
        Some(b'"') => Shape::String,
        Some(b'[') => Shape::Array,
        Some(b'{') => Shape::Object,
        Some(b'n') => Shape::Null,
        _ => Shape::Other,
    }
}

/// A `cache_control` member: an object (kept whole), or nothing when absent or `null`.
pub(crate) fn cache_control(
    raw: Option<&RawValue>,
) -> Result<Option<CacheControl>, TranslateError> {
    match raw.map(|r| (r, shape(r))) {
        None | Some((_, Shape::Null)) => Ok(None),
        Some((raw, Shape::Object)) => Ok(Some(CacheControl(RawJson::from_raw(raw)))),
        Some((raw, _)) => Err(TranslateError::invalid(format!(
            "`cache_control` must be an object such as {{\"type\":\"ephemeral\"}}, not `{}`",
            raw.get().chars().take(40).collect::<String>()
        ))),
    }
}

/// A string or an array of strings (OpenAI `stop`, Anthropic `system` as a string).
pub(crate) fn strings(name: &str, raw: &RawValue) -> Result<Vec<String>, TranslateError> {
    match shape(raw) {
        Shape::Null => Ok(Vec::new()),
        Shape::String => Ok(vec![parse::<String>(name, raw)?]),
        _ => parse(name, raw),
    }
}

/// The unknown members of a body, kept for writing back to `dialect`.
pub(crate) fn extra_from(dialect: Dialect, unknown: Vec<(Cow<'_, str>, &RawValue)>) -> Extra {
    if unknown.is_empty() {
        return Extra::default();
    }
    Extra {
        dialect: Some(dialect),
        fields: unknown
            .into_iter()
            .map(|(k, v)| (k.into_owned(), RawJson::from_raw(v)))
            .collect(),
    }
}

/// The unmodelled members to flatten into a body being written, minus those the writer sets.
pub(crate) struct ExtraFields<'a> {
    pub(crate) fields: &'a [(String, RawJson)],
    pub(crate) skip: &'a [&'a str],
}

impl Serialize for ExtraFields<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.fields {
            if !self.skip.contains(&key.as_str()) {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

/// An OpenAI image URL: a `data:` URL becomes inline base64, anything else stays a URL.
pub(crate) fn image_from_url(url: &str) -> Image {
    if let Some(rest) = url.strip_prefix("data:") {
        if let Some((meta, data)) = rest.split_once(',') {
            if let Some(media_type) = meta.strip_suffix(";base64") {
                return Image::Base64 {
                    media_type: media_type.to_owned(),
                    data: data.to_owned(),
                };
            }
        }
    }
    Image::Url(url.to_owned())
}

/// An image as an OpenAI `url` (inline bytes as a `data:` URL).
pub(crate) fn image_to_url(image: &Image) -> Cow<'_, str> {
    match image {
        Image::Url(url) => Cow::Borrowed(url),
        Image::Base64 { media_type, data } => {
            Cow::Owned(format!("data:{media_type};base64,{data}"))
        }
    }
}

/// The media type a URL's extension suggests (Gemini's `fileData` needs one), JPEG when unknown.
pub(crate) fn media_type_of_url(url: &str) -> &'static str {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    let ext = path.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
    match ext.as_str() {
        "png" => "image/png",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "heic" => "image/heic",
        "heif" => "image/heif",
        _ => "image/jpeg",
    }
}

/// Tool arguments (a JSON text) as the JSON object Anthropic's `input` and Gemini's `args` need.
/// Empty arguments are `{}`; arguments that are not a JSON object (a model can emit broken
/// JSON) are kept whole as `{"arguments": "<text>"}` rather than lost or failing the request.
pub(crate) fn arguments_object(arguments: &str) -> RawJson {
    let trimmed = arguments.trim();
    if trimmed.is_empty() {
        return RawJson(object_raw("{}"));
    }
    if trimmed.starts_with('{') {
        if let Ok(raw) = RawJson::from_text(trimmed) {
            return raw;
        }
    }
    RawJson::from_value(&serde_json::json!({ "arguments": arguments }))
}

/// A raw JSON object from a literal known to be valid.
fn object_raw(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_owned()).unwrap_or_else(|_| RawValue::NULL.to_owned())
}

/// Unix seconds now.
pub(crate) fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn splits_members_in_order() {
        let body = br#"{"b": [1, 2], "a\u0041": {"x": null}, "c": "s"}"#;
        let fields = fields(body).unwrap();
        let keys: Vec<&str> = fields.0.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(keys, ["b", "aA", "c"]);
        assert_eq!(fields.0[1].1.get(), r#"{"x": null}"#);
        assert!(super::fields(b"[1]").is_err());
    }

    #[test]
    fn data_urls_become_base64() {
        assert_eq!(
            image_from_url("data:image/png;base64,AAAA"),
            Image::Base64 {
                media_type: "image/png".into(),
                data: "AAAA".into()
            }
        );
        let url = "https://example.com/cat.PNG?x=1";
        assert_eq!(image_from_url(url), Image::Url(url.into()));
        assert_eq!(media_type_of_url(url), "image/png");
        assert_eq!(media_type_of_url("https://e.com/x"), "image/jpeg");
        let inline = image_from_url("data:image/gif;base64,R0lG");
        assert_eq!(image_to_url(&inline), "data:image/gif;base64,R0lG");
    }

    #[test]
    fn arguments_become_objects() {
        assert_eq!(arguments_object("").get(), "{}");
        assert_eq!(arguments_object(r#" {"a":1} "#).get(), r#"{"a":1}"#);
        assert_eq!(
            arguments_object(r#"{"a":"#).get(),
            r#"{"arguments":"{\"a\":"}"#
        );
        assert_eq!(arguments_object("[1]").get(), r#"{"arguments":"[1]"}"#);
    }
}

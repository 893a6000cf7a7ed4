//! A Responses API answer on its way to the client, under the id the gateway minted: the
//! response object of a whole answer, or the lifecycle events of a stream (`response.created`
//! ... `response.completed`), carry the gateway's id in place of the provider's, and the
//! completed response is kept in the gateway's store as it goes by.

use std::borrow::Cow;
use std::convert::Infallible;

use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::Keep;
use crate::wire::sse::{encode_event, SseDecoder};

/// The members of a response object the gateway reads.
#[derive(Deserialize)]
struct ResponseView<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    output: Option<&'a RawValue>,
}

/// The members of a lifecycle event the gateway reads.
#[derive(Deserialize)]
struct EventView<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    response: Option<&'a RawValue>,
}

/// Where the top-level `id` string of a JSON object is in `body`, and the id.
fn id_range(body: &[u8]) -> Option<(std::ops::Range<usize>, String)> {
    #[derive(Deserialize)]
    struct IdOnly<'a> {
        #[serde(default, borrow)]
        id: Option<&'a RawValue>,
    }
    let raw = serde_json::from_slice::<IdOnly<'_>>(body).ok()?.id?;
    let id: String = serde_json::from_str(raw.get()).ok()?;
    let start = raw.get().as_ptr() as usize - body.as_ptr() as usize;
    Some((start..start + raw.get().len(), id))
}

/// A whole answer (a response object) under `minted`: its top-level `id` replaced.
pub(super) fn rename_response(body: &[u8], minted: &str) -> Vec<u8> {
    let Some((range, _)) = id_range(body) else {
        return body.to_vec();
    };
    let minted = serde_json::Value::from(minted).to_string();
    let mut out = Vec::with_capacity(body.len() + minted.len());
    out.extend_from_slice(&body[..range.start]);
    out.extend_from_slice(minted.as_bytes());
    out.extend_from_slice(&body[range.end..]);
    out
}

/// The `output` items of a response object, as a JSON array.
pub(super) fn output_of(response: &[u8]) -> Option<String> {
    let view: ResponseView<'_> = serde_json::from_slice(response).ok()?;
    Some(
        view.output
            .map_or_else(|| "[]".to_owned(), |o| o.get().to_owned()),
    )
}

/// Every occurrence of the JSON string `from` in `data` as `to` (both JSON string literals).
fn replace(data: &[u8], from: &str, to: &str) -> Vec<u8> {
    let (from, to) = (from.as_bytes(), to.as_bytes());
    let mut out = Vec::with_capacity(data.len() + to.len());
    let mut rest = data;
    while let Some(at) = rest.windows(from.len()).position(|w| w == from) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(to);
        rest = &rest[at + from.len()..];
    }
    out.extend_from_slice(rest);
    out
}

struct Tap {
    body: BoxStream<'static, Result<Bytes, Infallible>>,
    sse: SseDecoder,
    /// The provider's id (as a JSON string), once a lifecycle event named it.
    upstream: Option<String>,
    /// The gateway's id, as a JSON string (`None`: the provider's stays).
    minted: Option<String>,
    keep: Option<Keep>,
    /// Where the reasoning of the completed response is remembered, and who made it.
    made: Option<Made>,
}

/// Who made a response's reasoning, and where that is remembered.
pub(super) struct Made {
    pub provenance: std::sync::Arc<super::provenance::Provenance>,
    pub provider: String,
}

impl Tap {
    /// One event as the client gets it; a completed response is kept.
    fn event(&mut self, name: Option<&str>, data: &[u8]) -> Bytes {
        let view = serde_json::from_slice::<EventView<'_>>(data).ok();
        let name = name
            .map(str::to_owned)
            .or_else(|| view.as_ref().map(|v| v.kind.to_string()))
            .unwrap_or_default();
        let Some(response) = view.as_ref().and_then(|v| v.response) else {
            return encode_event(&name, data);
        };
        if self.upstream.is_none() {
            let id = serde_json::from_str::<ResponseView<'_>>(response.get())
                .ok()
                .and_then(|r| r.id.map(Cow::into_owned));
            self.upstream = id.map(|id| serde_json::Value::from(id).to_string());
        }
        let renamed = match &self.upstream {
            Some(up) => match &self.minted {
                Some(minted) if minted != up => Cow::Owned(replace(data, up, minted)),
                _ => Cow::Borrowed(data),
            },
            _ => Cow::Borrowed(data),
        };
        let done = matches!(
            view.as_ref().map(|v| v.kind.as_ref()),
            Some("response.completed" | "response.incomplete")
        );
        if done {
            if let Some(made) = self.made.take() {
                made.provenance
                    .record_response(&made.provider, response.get().as_bytes());
            }
            if let Some(keep) = self.keep.take() {
                let event = serde_json::from_slice::<EventView<'_>>(&renamed).ok();
                if let Some(response) = event.and_then(|e| e.response) {
                    keep.put(response.get().as_bytes());
                }
            }
        }
        encode_event(&name, &renamed)
    }
}

/// A Responses event stream under the gateway's id `minted` (when set), the completed response
/// kept when `keep` is set and its reasoning remembered when `made` is.
pub(super) fn tap(
    body: BoxStream<'static, Result<Bytes, Infallible>>,
    minted: Option<&str>,
    keep: Option<Keep>,
    made: Option<Made>,
) -> BoxStream<'static, Result<Bytes, Infallible>> {
    let state = Tap {
        body,
        sse: SseDecoder::new(),
        upstream: None,
        minted: minted.map(|m| serde_json::Value::from(m).to_string()),
        keep,
        made,
    };
    futures_util::stream::unfold(state, |mut t| async move {
        loop {
            let Ok(bytes) = t.body.next().await?;
            t.sse.push_bytes(bytes);
            let mut out = Vec::new();
            while let Some(ev) = t.sse.next_event() {
                out.extend_from_slice(&t.event(ev.event.as_deref(), &ev.data));
            }
            if !out.is_empty() {
                return Some((Ok(Bytes::from(out)), t));
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_whole_answer_gets_the_minted_id_and_nothing_else_changes() {
        let body = br#"{"id":"resp_up","object":"response","output":[{"id":"msg_1","type":"message"}],"x":"resp_up"}"#;
        let out = rename_response(body, "resp_ours");
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"id":"resp_ours","object":"response","output":[{"id":"msg_1","type":"message"}],"x":"resp_up"}"#
        );
        assert_eq!(
            output_of(&out).as_deref(),
            Some(r#"[{"id":"msg_1","type":"message"}]"#)
        );
    }

    #[tokio::test]
    async fn stream_lifecycle_events_carry_the_minted_id() {
        let events = concat!(
            "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_up\",\"output\":[]}}\n\n",
            "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"delta\":\"resp_up\"}\n\n",
            "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_up\",\"output\":[]}}\n\n",
        );
        let (a, b) = events.split_at(50);
        let body = futures_util::stream::iter([
            Ok(Bytes::copy_from_slice(a.as_bytes())),
            Ok(Bytes::copy_from_slice(b.as_bytes())),
        ])
        .boxed();
        let out: Vec<_> = tap(body, Some("resp_ours"), None, None).collect().await;
        let out: String = out
            .into_iter()
            .map(|b| String::from_utf8(b.unwrap().to_vec()).unwrap())
            .collect();
        assert_eq!(out.matches("resp_ours").count(), 2, "{out}");
        assert!(
            out.contains(r#""delta":"resp_up""#),
            "the model's text is not touched: {out}"
        );
    }
}

//! `POST /v1/responses`: the OpenAI Responses API (Codex CLI, the OpenAI Agents SDK's default
//! model, `client.responses.create` / `.stream`), with the same failover as the other APIs.
//!
//! An OpenAI or Azure target (`responses = true`, their default) gets the client's body as it
//! came (only `model` rewritten) at its own `/responses`, and its answer goes back as it came
//! but for the response id. Every other target gets the request through the canonical model,
//! and its answer is written back as Responses events or a response object.
//!
//! State survives failover: with `store` (the API's default) the gateway keeps each response it
//! served (input and output items) under an id it mints, and a later request naming it as
//! `previous_response_id` is sent to whichever target is picked with the whole conversation as
//! its input. `GET /v1/responses/{id}`, `GET /v1/responses/{id}/input_items` and
//! `DELETE /v1/responses/{id}` read and remove those responses, for the client key that made
//! them only.

mod expand;
#[cfg(fuzzing)]
pub(super) mod fuzzing;
mod head;
pub(crate) mod provenance;
mod tap;

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::stream::BoxStream;
use http::{HeaderMap, StatusCode};
use serde::Deserialize;
use tokio::time::Instant;

use self::head::Head;
use self::provenance::Provenance;
use super::audited;
use super::error::ApiError;
use super::respond::{respond, with_id, Asked, Edge};
use super::stamp::Answered;
use super::AppState;
use crate::canonical::{self, Dialect};
use crate::config::BuiltinTools;
use crate::request_id;
use crate::response_store::{ResponseStore, StoredResponse};
use crate::routing::Target;
use crate::wire::client::Head as ClientHead;
use crate::wire::transcode;
use crate::wire::{ClientWire, Forms};

/// What the gateway keeps of one response, once it is complete.
pub(super) struct Keep {
    store: ResponseStore,
    record: StoredResponse,
}

impl Keep {
    /// Store the finished `response` object (as the client got it).
    fn put(mut self, response: &[u8]) {
        let Some(output) = tap::output_of(response) else {
            return;
        };
        self.record.output = output;
        self.record.response = String::from_utf8_lossy(response).into_owned();
        // A response too large to keep is counted by the store; its id then finds nothing.
        let _ = self.store.put(self.record);
    }
}

/// A Responses API request's answer under the id the gateway minted for it.
pub(super) struct Minted {
    id: String,
    /// Set when the response is to be stored: everything but the answer and its provider.
    keep: Option<Keep>,
    /// Set when the client asked for encrypted reasoning: who made it is remembered.
    provenance: Option<Arc<Provenance>>,
}

impl Minted {
    fn keep_for(&mut self, served: Option<&Target>) -> Option<Keep> {
        let mut keep = self.keep.take()?;
        keep.record.provider = served.map(|t| t.provider.config.name.clone())?;
        Some(keep)
    }

    /// Who made the answer's reasoning, when the client asked for it encrypted and a target of
    /// its dialect answered (only a provider's own Responses API makes it).
    fn made_by(&mut self, from: Dialect, served: Option<&Target>) -> Option<tap::Made> {
        let provenance = self
            .provenance
            .take()
            .filter(|_| from == Dialect::Responses)?;
        Some(tap::Made {
            provenance,
            provider: served?.provider.config.name.clone(),
        })
    }

    /// A whole answer of dialect `from` as the client's response object (stored when asked).
    pub(super) fn full(&mut self, body: Bytes, from: Dialect, served: Option<&Target>) -> Bytes {
        let keep = self.keep_for(served);
        if let Some(made) = self.made_by(from, served) {
            made.provenance.record_response(&made.provider, &body);
        }
        let out = match from {
            Dialect::Responses if keep.is_none() => return body,
            Dialect::Responses => tap::rename_response(&body, &self.id),
            _ => {
                let written = from.parse_response(&body).and_then(|mut resp| {
                    resp.id.clone_from(&self.id);
                    canonical::responses::write_response(&resp)
                });
                match written {
                    Ok(out) => out,
                    Err(_) => return body,
                }
            }
        };
        if let Some(keep) = keep {
            keep.put(&out);
        }
        Bytes::from(out)
    }

    /// A streamed answer of dialect `from` as the client's Responses events (the completed
    /// response stored when asked, its reasoning's maker remembered).
    pub(super) fn stream(
        &mut self,
        body: BoxStream<'static, Result<Bytes, Infallible>>,
        from: Dialect,
        served: Option<&Target>,
    ) -> BoxStream<'static, Result<Bytes, Infallible>> {
        let keep = self.keep_for(served);
        let made = self.made_by(from, served);
        let body = match from {
            Dialect::Responses if keep.is_none() && made.is_none() => return body,
            Dialect::Responses => body,
            _ => transcode::stream_from_openai_with(
                body,
                canonical::StreamEncoder::Responses(
                    canonical::responses::Encoder::new().with_response_id(self.id.clone()),
                ),
            ),
        };
        if keep.is_none() && made.is_none() {
            return body;
        }
        // The provider's id stays when nothing is stored (`store: false`).
        let minted = keep.as_ref().map(|_| self.id.as_str());
        tap::tap(body, minted, keep, made)
    }
}

/// A provider, and the body every other provider gets.
type Elsewhere = (Arc<str>, Vec<u8>);

/// The body for providers other than the one that made the encrypted reasoning among `body`'s
/// input items (that provider's name and the body without reasoning items), when the gateway
/// knows who made it.
fn reasoning_elsewhere(
    provenance: &Provenance,
    body: &[u8],
) -> Result<Option<Elsewhere>, canonical::TranslateError> {
    #[derive(Deserialize)]
    struct Input<'a> {
        #[serde(default, borrow)]
        input: Option<&'a serde_json::value::RawValue>,
    }
    // Most requests carry no reasoning a provider here made: known in one scan, or at once.
    if provenance.is_empty() || provenance.maker_of_input(body) == Some(None) {
        return Ok(None);
    }
    let head: Input<'_> = serde_json::from_slice(body)?;
    let Some(input) = head.input.filter(|i| i.get().starts_with('[')) else {
        return Ok(None);
    };
    let items: Vec<&serde_json::value::RawValue> = serde_json::from_str(input.get())?;
    let Some(maker) = provenance.maker(&items) else {
        return Ok(None);
    };
    let mut kept = String::from("[");
    for item in items.iter().filter(|i| !provenance::is_reasoning(i)) {
        if kept.len() > 1 {
            kept.push(',');
        }
        kept.push_str(item.get());
    }
    kept.push(']');
    Ok(Some((maker, expand::rewrite(body, &kept)?)))
}

fn not_found(what: &str, id: &str, param: Option<&'static str>) -> ApiError {
    let code = match param {
        Some(_) => "previous_response_not_found",
        None => "not_found",
    };
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        code,
        format!("{what} with id '{id}' not found."),
    )
}

fn invalid(e: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request("invalid_request", e.to_string())
}

/// `POST /v1/responses`.
pub(super) async fn create(
    State(state): State<AppState>,
    request: axum::extract::Request,
) -> Answered {
    let started = Instant::now();
    let mut id = request_id::new();
    let (parts, body) = request.into_parts();
    match serve(&state, &parts.headers, body, &mut id, started).await {
        // `respond` took the id; the answer carries it.
        Ok(answered) => answered,
        // Refused before `respond`: the id is still here.
        Err(err) => {
            debug_assert!(!id.is_empty());
            audited::refused(&state.audit, &id, "", false, None, &err, started);
            Answered::refused(err.into_dialect_response(Dialect::Responses)).with_id(id)
        }
    }
}

async fn serve(
    state: &AppState,
    h: &HeaderMap,
    body: Body,
    id: &mut String,
    started: Instant,
) -> Result<Answered, ApiError> {
    let edge = Edge::open(state, h, body, started).await?;
    // One scanner pass for the head and what only a Responses target serves (serde_json for
    // a body it does not take).
    let plain = canonical::responses::read_plain(&edge.body);
    let head = Head::read(&edge.body, plain.as_ref().map(|(_, spans)| spans)).map_err(invalid)?;
    let store = &state.responses;
    let keep = head.store != Some(false) && store.enabled();
    let key = edge.client_key_id.as_deref();
    // The earlier turn, from the gateway's store; without a store the id goes on to the
    // provider, which alone can resolve it.
    let mut native_only = None;
    let previous = match head.previous_response_id.as_deref() {
        Some(prev) if store.enabled() => {
            let found = store.get(prev, key).await.map_err(|e| {
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "api_error",
                    "store_unavailable",
                    format!("the gateway's response store could not be read: {e}"),
                )
            })?;
            Some(found.ok_or_else(|| {
                not_found("Previous response", prev, Some("previous_response_id"))
            })?)
        }
        Some(_) => {
            native_only = Some(
                "it names a previous_response_id and the gateway keeps no responses: only the \
                 provider that made it can resolve it"
                    .to_owned(),
            );
            None
        }
        None => None,
    };
    let history = previous
        .as_ref()
        .map(|p| (p.input.as_str(), p.output.as_str()));
    // The whole input is made only when something needs it: a history to expand, or a
    // response to keep.
    let expanded = if history.is_some() || keep {
        expand::expand(&edge.body, history).map_err(invalid)?
    } else {
        expand::Expanded::default()
    };
    let body = match &previous {
        Some(_) => Bytes::from(expanded.body),
        None => edge.body.clone(),
    };
    // The client's own head; a body the gateway expanded is read again for its `model`.
    let read = match &previous {
        Some(_) => serde_json::from_slice::<Head<'_>>(&body)
            .map_err(invalid)
            .and_then(|h| ClientHead::of(&body, h.model, h.stream).map_err(invalid))?,
        None => ClientHead::of(&edge.body, head.model, head.stream).map_err(invalid)?,
    };
    // Built-in tools the request only offers keep it off translated targets unless its route
    // lets those targets serve it without them.
    let needs = match (&previous, plain) {
        (None, Some((needs, _))) => needs, // `body` is the client's, read above
        _ => canonical::responses::native_needs(&body),
    };
    let drops_offered = state
        .routing
        .load()
        .route(&read.model)
        .is_some_and(|r| r.config.failover.builtin_tools == BuiltinTools::Drop);
    let offered = needs.offers.filter(|_| !drops_offered);
    native_only = native_only.or_else(|| needs.uses.or(offered).map(str::to_owned));
    // Reasoning the client sends back goes as it came only to the provider that made it.
    let sealed_elsewhere = match (&previous, &head.previous_response_id) {
        (None, None) => reasoning_elsewhere(&state.reasoning, &body).map_err(invalid)?,
        _ => None,
    };
    let forms = Arc::new(Forms::native(Dialect::Responses, body.clone()));
    let mut client = ClientWire::native_read(Dialect::Responses, body, &read, h, None);
    if let (Some(prev), Some(elsewhere)) = (&previous, expanded.elsewhere) {
        client = client.elsewhere(&prev.provider, Bytes::from(elsewhere));
    } else if let Some((maker, elsewhere)) = sealed_elsewhere {
        client = client.elsewhere(&maker, Bytes::from(elsewhere));
    }
    client.native_only = native_only;
    let minted_id = crate::response_store::new_id();
    let keep = keep.then(|| Keep {
        store: store.clone(),
        record: StoredResponse {
            id: minted_id.clone(),
            client_key_id: edge.client_key_id.clone(),
            created_ms: crate::clock::wall_ms_i64(),
            route: read.model.clone(),
            provider: String::new(),
            previous_id: previous.as_ref().map(|p| p.id.clone()),
            input: expanded.input,
            output: String::new(),
            response: String::new(),
        },
    });
    let wants_sealed = head
        .include
        .iter()
        .any(|i| i == "reasoning.encrypted_content");
    let minted = Minted {
        id: minted_id,
        keep,
        provenance: wants_sealed.then(|| state.reasoning.clone()),
    };
    let asked = Asked {
        dialect: Dialect::Responses,
        stream: read.stream,
        // Responses streams always report usage.
        client_wants_usage: true,
        forms,
        model: read.model,
        client,
        minted: Some(minted),
    };
    Ok(respond(state, edge, id, asked).await)
}

/// The client key of a request to the read endpoints (401 without a valid one under `[auth]`;
/// without client keys, a browser of another site is refused: `guard::client`).
fn key_of(state: &AppState, h: &HeaderMap) -> Result<Option<String>, ApiError> {
    super::guard::client(state, h)
}

async fn stored(
    state: &AppState,
    h: &HeaderMap,
    id: &str,
) -> Result<std::sync::Arc<StoredResponse>, ApiError> {
    let key = key_of(state, h)?;
    let found = state.responses.get(id, key.as_deref()).await.map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "api_error",
            "store_unavailable",
            format!("the gateway's response store could not be read: {e}"),
        )
    })?;
    found.ok_or_else(|| not_found("Response", id, None))
}

fn json(status: StatusCode, body: impl Into<Body>) -> Response {
    let mut r = Response::new(body.into());
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

/// `GET /v1/responses/{id}`: a response the gateway stored, as the client got it.
pub(super) async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
    h: HeaderMap,
) -> Response {
    let resp = match stored(&state, &h, &id).await {
        Ok(found) => json(StatusCode::OK, found.response.clone()),
        Err(e) => e.into_response(),
    };
    with_id(resp, request_id::new())
}

/// The query of `GET /v1/responses/{id}/input_items`.
#[derive(Debug, Deserialize)]
pub(super) struct ListQuery {
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    order: Option<String>,
    #[serde(default)]
    after: Option<String>,
}

/// `GET /v1/responses/{id}/input_items`: the input items of a stored response (the whole
/// conversation it answered), in OpenAI's list shape; items that came without an `id` are
/// listed under one made from the response's.
pub(super) async fn input_items(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<ListQuery>,
    h: HeaderMap,
) -> Response {
    let resp = match stored(&state, &h, &id)
        .await
        .and_then(|found| list(&found, &q))
    {
        Ok(body) => json(StatusCode::OK, body),
        Err(e) => e.into_response(),
    };
    with_id(resp, request_id::new())
}

fn list(found: &StoredResponse, q: &ListQuery) -> Result<String, ApiError> {
    use serde_json::Value;
    let mut items: Vec<Value> = serde_json::from_str(&found.input).map_err(invalid)?;
    for (i, item) in items.iter_mut().enumerate() {
        if let Some(map) = item.as_object_mut() {
            if !map.contains_key("id") {
                map.insert("id".into(), Value::from(format!("{}_item_{i}", found.id)));
            }
        }
    }
    let descending = match q.order.as_deref() {
        None | Some("desc") => true,
        Some("asc") => false,
        Some(other) => {
            return Err(ApiError::bad_request(
                "invalid_request",
                format!("order must be `asc` or `desc`, not `{other}`"),
            ))
        }
    };
    if descending {
        items.reverse();
    }
    if let Some(after) = &q.after {
        let at = items
            .iter()
            .position(|i| i.get("id").and_then(Value::as_str) == Some(after.as_str()));
        items = at.map_or_else(Vec::new, |at| items.split_off(at + 1));
    }
    let limit = q.limit.unwrap_or(20).clamp(1, 100);
    let has_more = items.len() > limit;
    items.truncate(limit);
    let id_of = |i: Option<&Value>| i.and_then(|v| v.get("id")).cloned().unwrap_or(Value::Null);
    let body = serde_json::json!({
        "object": "list",
        "data": items,
        "first_id": id_of(items.first()),
        "last_id": id_of(items.last()),
        "has_more": has_more,
    });
    Ok(body.to_string())
}

/// `DELETE /v1/responses/{id}`.
pub(super) async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
    h: HeaderMap,
) -> Response {
    let resp = match delete_stored(&state, &h, &id).await {
        Ok(()) => json(
            StatusCode::OK,
            serde_json::json!({"id": id, "object": "response", "deleted": true}).to_string(),
        ),
        Err(e) => e.into_response(),
    };
    with_id(resp, request_id::new())
}

async fn delete_stored(state: &AppState, h: &HeaderMap, id: &str) -> Result<(), ApiError> {
    let key = key_of(state, h)?;
    let deleted = state
        .responses
        .delete(id, key.as_deref())
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "api_error",
                "store_unavailable",
                format!("the gateway's response store could not be written: {e}"),
            )
        })?;
    if deleted {
        Ok(())
    } else {
        Err(not_found("Response", id, None))
    }
}

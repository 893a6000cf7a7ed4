//! Streamed answers with faults, independent of the wire dialect.
//!
//! A dialect renders its events (already framed as SSE bytes) into a [`Script`]; the plan turns the
//! script into a list of [`Step`]s (send, wait, hang, cut); a body stream plays the steps. The
//! request's [`RequestGuard`] lives in the body stream, so a client that goes away mid-stream
//! drops it and is counted as cancelled.

use std::collections::VecDeque;
use std::io;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;

use super::plan::FaultPlan;
use super::state::RequestGuard;

/// An SSE event: `event: <name>` when named, `data: <json>`, then `end` (`\n\n`, or `\r\n\r\n`
/// for Gemini). The JSON is written straight into the event's buffer: `format!` with the
/// value's `Display` went through the formatter a piece at a time (7,700 of the 12,000
/// instructions an OpenAI chunk cost).
pub(crate) fn sse_event(name: Option<&str>, data: &serde_json::Value, end: &str) -> Bytes {
    let mut buf = Vec::with_capacity(256);
    if let Some(name) = name {
        buf.extend_from_slice(b"event: ");
        buf.extend_from_slice(name.as_bytes());
        buf.push(b'\n');
    }
    buf.extend_from_slice(b"data: ");
    // A `Value` always serialises (its keys are strings) and a `Vec` takes every write.
    let _ = serde_json::to_writer(&mut buf, data);
    buf.extend_from_slice(end.as_bytes());
    Bytes::from(buf)
}

/// The events of one streamed answer, in a dialect's framing.
#[derive(Debug, Clone, Default)]
pub(crate) struct Script {
    /// Sent with the headers, before any content (OpenAI's role chunk).
    pub(crate) head: Vec<Bytes>,
    /// One event per content chunk: what the fault plan counts.
    pub(crate) content: Vec<Bytes>,
    /// After the content: finish and usage events.
    pub(crate) tail: Vec<Bytes>,
    /// The terminator (OpenAI's `data: [DONE]`), if the dialect has one.
    pub(crate) done: Option<Bytes>,
    /// The in-band error event for `inband_error_after`.
    pub(crate) inband_error: Bytes,
    /// The unparsable event for `malformed_chunk_at`.
    pub(crate) malformed: Bytes,
}

impl Script {
    /// With the plan's `error_body` as the in-band error event's data, under `event: NAME` when
    /// the dialect names its events (Anthropic's `error`): a provider's own words in a stream.
    pub(crate) fn with_error_body(mut self, plan: &FaultPlan, event: Option<&str>) -> Script {
        if let Some(body) = &plan.error_body {
            let name = event.map(|n| format!("event: {n}\n")).unwrap_or_default();
            self.inband_error = Bytes::from(format!("{name}data: {body}\n\n"));
        }
        self
    }
}

/// One thing the body stream does.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Send(Bytes),
    Wait(Duration),
    /// Nothing more, ever: the connection stays open until the client leaves.
    Hang,
    /// Abort the body: hyper closes the connection without a proper end.
    Cut,
    /// Everything the plan asked for is out (or about to be): count the request completed.
    /// Placed before the last event, so a client that has seen the end sees it counted.
    Complete,
}

/// The steps that play `script` under `plan`.
fn steps(script: Script, plan: &FaultPlan) -> VecDeque<Step> {
    let mut out: VecDeque<Step> = script.head.into_iter().map(Step::Send).collect();
    let count = script.content.len();
    let mut content = script.content.into_iter();
    for index in 0..=count {
        if index < count {
            let ms = if index == 0 {
                plan.first_token_ms
            } else {
                plan.chunk_delay_ms
            };
            if ms > 0 {
                out.push_back(Step::Wait(Duration::from_millis(ms)));
            }
        }
        // Faults take the place of content chunk `index`, when it would have been sent.
        let at = Some(u32::try_from(index).unwrap_or(u32::MAX));
        if plan.stall_after_chunks == at {
            out.push_back(Step::Hang);
            return out;
        }
        if plan.cut_after_chunks == at {
            out.extend([Step::Complete, Step::Cut]);
            return out;
        }
        if plan.inband_error_after == at {
            out.extend([Step::Complete, Step::Send(script.inband_error)]);
            hold_open(&mut out, plan);
            return out;
        }
        if plan.malformed_chunk_at == at {
            out.push_back(Step::Send(script.malformed.clone()));
        }
        out.extend(content.next().map(Step::Send));
    }
    let mut last: Vec<Bytes> = script.tail;
    if !plan.omit_done {
        last.extend(script.done);
    }
    let final_event = last.pop();
    out.extend(last.into_iter().map(Step::Send));
    out.push_back(Step::Complete);
    out.extend(final_event.map(Step::Send));
    hold_open(&mut out, plan);
    out
}

fn hold_open(out: &mut VecDeque<Step>, plan: &FaultPlan) {
    if plan.hold_open_ms > 0 {
        out.push_back(Step::Wait(Duration::from_millis(plan.hold_open_ms)));
    }
}

/// What the body stream carries between polls.
struct Playback {
    steps: VecDeque<Step>,
    guard: RequestGuard,
    /// Sent every so often while waiting (`keepalive_ms`).
    keepalive: Option<(Duration, Bytes)>,
}

/// The next chunk of the body, running waits, hangs and completion marks on the way.
async fn next(mut playback: Playback) -> Option<(io::Result<Bytes>, Playback)> {
    loop {
        match playback.steps.pop_front() {
            Some(Step::Send(bytes)) => return Some((Ok(bytes), playback)),
            Some(Step::Wait(duration)) => match playback.keepalive.clone() {
                Some((every, event)) if duration > every => {
                    tokio::time::sleep(every).await;
                    playback.steps.push_front(Step::Wait(duration - every));
                    return Some((Ok(event), playback));
                }
                _ => tokio::time::sleep(duration).await,
            },
            Some(Step::Hang) => match playback.keepalive.clone() {
                Some((every, event)) => {
                    tokio::time::sleep(every).await;
                    playback.steps.push_front(Step::Hang);
                    return Some((Ok(event), playback));
                }
                None => std::future::pending::<()>().await,
            },
            Some(Step::Cut) => {
                // Let hyper flush what was sent first: the client must see the chunks before the cut.
                tokio::task::yield_now().await;
                let cut =
                    io::Error::new(io::ErrorKind::ConnectionAborted, "mock: cut_after_chunks");
                return Some((Err(cut), playback));
            }
            Some(Step::Complete) => playback.guard.complete(),
            None => {
                playback.guard.complete();
                return None;
            }
        }
    }
}

/// A `200 text/event-stream` response playing `script` under `plan`.
pub(crate) fn response(script: Script, plan: &FaultPlan, guard: RequestGuard) -> Response {
    let playback = Playback {
        steps: steps(script, plan),
        guard,
        keepalive: plan.keepalive(),
    };
    let body = Body::from_stream(futures_util::stream::unfold(playback, next));
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::mock::state::MockState;
    use futures_util::StreamExt as _;
    use tokio::time::Instant;

    fn script(words: usize) -> Script {
        let event = |s: String| Bytes::from(s);
        Script {
            head: vec![event("role".into())],
            content: (0..words).map(|i| event(format!("w{i}"))).collect(),
            tail: vec![event("finish".into())],
            done: Some(event("done".into())),
            inband_error: event("inband".into()),
            malformed: event("bad".into()),
        }
    }

    fn sends(steps: &VecDeque<Step>) -> Vec<String> {
        steps
            .iter()
            .map(|s| match s {
                Step::Send(b) => String::from_utf8_lossy(b).into_owned(),
                Step::Wait(d) => format!("wait{}", d.as_millis()),
                Step::Hang => "hang".into(),
                Step::Cut => "cut".into(),
                Step::Complete => "complete".into(),
            })
            .collect()
    }

    #[test]
    fn healthy_script() {
        let plan = FaultPlan {
            first_token_ms: 5,
            chunk_delay_ms: 1,
            ..FaultPlan::default()
        };
        let got = sends(&steps(script(2), &plan));
        assert_eq!(
            got,
            ["role", "wait5", "w0", "wait1", "w1", "finish", "complete", "done"]
        );
    }

    #[test]
    fn faults_replace_the_nth_chunk() {
        let cut = FaultPlan {
            cut_after_chunks: Some(1),
            ..FaultPlan::default()
        };
        assert_eq!(
            sends(&steps(script(3), &cut)),
            ["role", "w0", "complete", "cut"]
        );
        let stall = FaultPlan {
            stall_after_chunks: Some(0),
            ..FaultPlan::default()
        };
        assert_eq!(sends(&steps(script(3), &stall)), ["role", "hang"]);
        let inband = FaultPlan {
            inband_error_after: Some(3),
            ..FaultPlan::default()
        };
        assert_eq!(
            sends(&steps(script(3), &inband)),
            ["role", "w0", "w1", "w2", "complete", "inband"]
        );
        let bad = FaultPlan {
            malformed_chunk_at: Some(1),
            ..FaultPlan::default()
        };
        assert_eq!(
            sends(&steps(script(2), &bad)),
            ["role", "w0", "bad", "w1", "finish", "complete", "done"]
        );
        let no_done = FaultPlan {
            omit_done: true,
            hold_open_ms: 9,
            ..FaultPlan::default()
        };
        assert_eq!(
            sends(&steps(script(1), &no_done)),
            ["role", "w0", "complete", "finish", "wait9"]
        );
        let late = FaultPlan {
            cut_after_chunks: Some(7),
            ..FaultPlan::default()
        };
        assert_eq!(
            sends(&steps(script(1), &late)).last().map(String::as_str),
            Some("done")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn playback_keeps_time_and_counts() {
        let state = MockState::new("m");
        let plan = FaultPlan {
            first_token_ms: 300,
            chunk_delay_ms: 50,
            ..FaultPlan::default()
        };
        let playback = Playback {
            steps: steps(script(3), &plan),
            guard: state.begin(None),
            keepalive: None,
        };
        let start = Instant::now();
        let mut stream = Box::pin(futures_util::stream::unfold(playback, next));
        let mut times = Vec::new();
        while let Some(item) = stream.next().await {
            item.unwrap();
            times.push(start.elapsed().as_millis());
        }
        assert_eq!(times, [0, 300, 350, 400, 400, 400]);
        assert_eq!(state.stats().completed, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn keepalives_fill_waits_and_hangs() {
        let state = MockState::new("m");
        let plan = FaultPlan {
            first_token_ms: 250,
            stall_after_chunks: Some(1),
            keepalive_ms: 100,
            ..FaultPlan::default()
        };
        let playback = Playback {
            steps: steps(script(3), &plan),
            guard: state.begin(None),
            keepalive: plan.keepalive(),
        };
        let start = Instant::now();
        let mut stream = Box::pin(futures_util::stream::unfold(playback, next));
        let mut got = Vec::new();
        for _ in 0..6 {
            let bytes = stream.next().await.unwrap().unwrap();
            got.push((
                start.elapsed().as_millis(),
                String::from_utf8_lossy(&bytes).into_owned(),
            ));
        }
        let ka = ": keepalive\n\n".to_owned();
        assert_eq!(
            got,
            [
                (0, "role".to_owned()),
                (100, ka.clone()),
                (200, ka.clone()),
                (250, "w0".to_owned()),
                (350, ka.clone()),
                (450, ka),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn dropped_mid_stream_is_cancelled() {
        let state = MockState::new("m");
        let plan = FaultPlan {
            stall_after_chunks: Some(1),
            ..FaultPlan::default()
        };
        let playback = Playback {
            steps: steps(script(3), &plan),
            guard: state.begin(None),
            keepalive: None,
        };
        let mut stream = Box::pin(futures_util::stream::unfold(playback, next));
        assert!(stream.next().await.is_some());
        assert!(stream.next().await.is_some());
        let hung = tokio::time::timeout(Duration::from_secs(3600), stream.next()).await;
        assert!(hung.is_err());
        drop(stream);
        let stats = state.stats();
        assert_eq!((stats.completed, stats.cancelled), (0, 1));
    }

    #[test]
    fn error_body_replaces_the_in_band_error_in_the_dialect_framing() {
        let plan = FaultPlan {
            error_body: Some(r#"{"error":{"message":"own words"}}"#.into()),
            ..Default::default()
        };
        let openai = script(1).with_error_body(&plan, None).inband_error;
        assert_eq!(
            &openai[..],
            br#"data: {"error":{"message":"own words"}}

"#
        );
        let anthropic = script(1).with_error_body(&plan, Some("error")).inband_error;
        assert!(anthropic.starts_with(b"event: error\ndata: {"));
        let unchanged = script(1).with_error_body(&FaultPlan::default(), None);
        assert_eq!(unchanged.inband_error, script(1).inband_error);
    }

    #[test]
    fn an_sse_event_is_written_as_its_values_display_writes_it() {
        let values = [
            serde_json::json!({"z": 1, "a": "quote \" and \\ and \n", "m": [null, true, 1.5]}),
            serde_json::json!({"text": "snow ❄ and \u{1}", "nested": {"b": {}, "a": []}}),
            serde_json::json!("just a string"),
        ];
        for value in &values {
            assert_eq!(
                &sse_event(None, value, "\n\n")[..],
                format!("data: {value}\n\n").as_bytes()
            );
            assert_eq!(
                &sse_event(Some("message_delta"), value, "\r\n\r\n")[..],
                format!("event: message_delta\ndata: {value}\r\n\r\n").as_bytes()
            );
        }
    }
}

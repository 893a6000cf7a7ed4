use super::*;
use crate::canonical::Dialect;
use crate::wire::chunks::tests::forwarded;

fn ev(name: &str, data: &str) -> SseEvent {
    SseEvent::new(
        Some(name.to_owned()),
        Bytes::copy_from_slice(data.as_bytes()),
    )
}

#[test]
fn events_go_on_as_they_came_and_the_state_follows() {
    let mut t = ChunkTracker::for_dialect(Dialect::Anthropic, true);
    t.capture_text();
    let start = r#"{"type":"message_start","message":{"id":"msg_1","model":"claude","usage":{"input_tokens":12,"cache_read_input_tokens":400}}}"#;
    assert_eq!(
        forwarded(t.on_event(&ev("message_start", start))),
        format!("event: message_start\ndata: {start}\n\n")
    );
    assert_eq!(t.stream_id(), Some("msg_1"));
    let thinking = r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#;
    t.on_event(&ev("content_block_start", thinking));
    assert!(!t.committed && !t.resumable());
    let sig = r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}}"#;
    assert!(forwarded(t.on_event(&ev("content_block_delta", sig))).contains("EqQB"));
    assert!(t.committed);
    t.on_event(&ev(
        "content_block_stop",
        r#"{"type":"content_block_stop","index":0}"#,
    ));
    let text =
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#;
    t.on_event(&ev("content_block_start", text));
    let delta =
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}"#;
    t.on_event(&ev("content_block_delta", delta));
    assert_eq!(t.last_text(), "Hi");
    assert_eq!(t.blocks(), (2, Some(1)));
    let unknown = r#"{"type":"brand_new_event","x":1}"#;
    assert!(forwarded(t.on_event(&ev("brand_new_event", unknown))).contains("brand_new_event"));
    let end = r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}"#;
    t.on_event(&ev("message_delta", end));
    assert!(t.finished && t.usage_seen);
    // Every input token: the 12 Anthropic counts and the 400 the cache read.
    assert_eq!(
        t.usage,
        Some(Usage {
            cache_read_tokens: 400,
            ..Usage::new(412, 7)
        })
    );
    assert!(matches!(
        t.on_event(&ev("message_stop", r#"{"type":"message_stop"}"#)),
        ChunkAction::Done
    ));
    assert!(String::from_utf8_lossy(&t.terminator()).starts_with("event: message_stop\n"));
}

#[test]
fn cache_counts_add_to_the_input_and_the_last_event_that_gives_one_wins() {
    let mut t = ChunkTracker::for_dialect(Dialect::Anthropic, true);
    // A write given only by its parts (1h and 5m) counts as their sum.
    let start = r#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":5,"cache_creation":{"ephemeral_5m_input_tokens":100,"ephemeral_1h_input_tokens":20},"output_tokens":1}}}"#;
    t.on_event(&ev("message_start", start));
    assert_eq!(
        t.usage,
        Some(Usage {
            cache_write_tokens: 120,
            ..Usage::new(125, 1)
        })
    );
    // message_delta's counts are cumulative: the total replaces the parts, the read is
    // new, the input it does not give stays.
    let end = r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9,"cache_creation_input_tokens":130,"cache_read_input_tokens":2000,"cache_creation":{"ephemeral_5m_input_tokens":1,"ephemeral_1h_input_tokens":1}}}"#;
    t.on_event(&ev("message_delta", end));
    assert_eq!(
        t.usage,
        Some(Usage {
            prompt_tokens: 2135,
            completion_tokens: 9,
            cache_read_tokens: 2000,
            cache_write_tokens: 130,
        })
    );
}

#[test]
fn tool_use_commits_and_errors_are_reported() {
    let mut t = ChunkTracker::for_dialect(Dialect::Anthropic, true);
    let tool = r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"f","input":{}}}"#;
    t.on_event(&ev("content_block_start", tool));
    assert!(t.committed && t.tool_calls_seen && !t.resumable());
    let err = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    match t.on_event(&ev("error", err)) {
        ChunkAction::Error(m) => assert_eq!(m, "Overloaded"),
        other => panic!("expected an error, got {other:?}"),
    }
    let tail = t.error_tail("broken");
    assert_eq!(tail.len(), 1);
    assert!(String::from_utf8_lossy(&tail[0]).starts_with("event: error\n"));
    assert!(matches!(t.on_event(&ev("x", "{nope")), ChunkAction::Skip));
}

/// A stream's block deltas are read by the shape of the first after the commit point, each as
/// serde_json reads it; one whose type, index or texts the view would read otherwise is read
/// whole.
#[test]
fn block_deltas_of_one_shape_read_as_whole_ones() {
    let delta = |index: &str, text: &str| {
        format!(
            r#"{{"type":"content_block_delta","index":{index},"delta":{{"type":"text_delta","text":{text}}}}}"#
        )
    };
    let stream = [
        r#"{"type":"message_start","message":{"id":"msg_1","model":"claude","usage":{"input_tokens":12}}}"#.to_owned(),
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#.to_owned(),
        delta("0", r#""Hi""#),
        delta("0", r#""""#),
        delta("0", r#"" th\"ere\u00e9\n""#),
        delta("0", r#""\ud800""#),
        delta("-1", r#""minus""#),
        delta("4294967296", r#""past u32""#),
        delta("0", "null"),
        delta("0", r#""again""#),
        delta("0", r#""x""#).replace("text_delta", "thinking_delta"),
        delta("0", r#""x""#).replace(r#""text_delta""#, r#""text\u005fdelta""#),
        delta("0", r#""x""#).replace("text_delta", "future_delta"),
        delta("0", r#""x""#).replace("content_block_delta", "content_block_delte"),
        r#"{"type":"content_block_stop","index":0}"#.to_owned(),
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}"#.to_owned(),
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\""}}"#.to_owned(),
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":":1}"}}"#.to_owned(),
        r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}"#.to_owned(),
    ];
    for capture in [false, true] {
        let mut shaped = ChunkTracker::for_dialect(Dialect::Anthropic, true);
        let mut whole = ChunkTracker::for_dialect(Dialect::Anthropic, true).without_shapes();
        shaped.set_capture(capture);
        whole.set_capture(capture);
        for event in &stream {
            let a = shaped.on_event(&ev("content_block_delta", event));
            let b = whole.on_event(&ev("content_block_delta", event));
            assert_eq!(forwarded(a), forwarded(b), "{event}");
            assert_eq!(shaped.observed(), whole.observed(), "{event}");
        }
        assert_eq!(shaped.malformed, 3, "a lone surrogate, -1, past u32");
        assert!(whole.shape.is_none());
    }
    // The shape made of the first delta after the commit point (the first text) reads those
    // whose view reads alike.
    let mut t = ChunkTracker::for_dialect(Dialect::Anthropic, true);
    for event in &stream[..4] {
        t.on_event(&ev("content_block_delta", event));
    }
    let Some(Shaped::BlockDelta(shape)) = t.shape.as_deref() else {
        panic!("no shape made");
    };
    for (n, event) in stream.iter().enumerate() {
        let read = shape.read(event.as_bytes());
        assert_eq!(
            read.is_some(),
            [2, 3, 4, 9, 10, 11, 12].contains(&n),
            "{event}"
        );
    }
}

/// A delta's type is one of a few words, taken as the constant without decoding it; any other
/// string is decoded, as `text` reads it.
#[test]
fn a_delta_s_known_type_is_read_without_decoding() {
    let read = |value: &str| {
        let data = format!(r#"{{"type":{value}}}"#);
        let span = 8..8 + value.len();
        let known = known_text(data.as_bytes(), Some(span.clone()), &DELTA_KINDS);
        assert_eq!(known, text(data.as_bytes(), Some(span)), "{value}");
        // Whether it is the constant itself, not a slice of the data.
        let constant = |t: Cow<'_, str>| DELTA_KINDS.iter().any(|k| k.as_ptr() == t.as_ptr());
        known.map(|t| t.map(constant))
    };
    for kind in DELTA_KINDS {
        assert_eq!(read(&format!(r#""{kind}""#)), Some(Some(true)), "{kind}");
    }
    assert_eq!(read(r#""text\u005fdelta""#), Some(Some(false)));
    assert_eq!(read(r#""future_delta""#), Some(Some(false)));
    assert_eq!(read("null"), Some(None));
    assert_eq!(read("7"), None);
    assert_eq!(known_text(b"{}", None, &DELTA_KINDS), Some(None));
}

/// The events Anthropic sends are read by the scanner as serde_json reads them, and what
/// the scanner does not read so is left to serde_json: the reading is serde_json's.
#[test]
fn events_read_by_the_scanner_read_as_by_serde() {
    // Read by the scanner (the last message's id is a number: no message, as serde_json).
    let sent = [
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-x","stop_reason":null,"usage":{"input_tokens":25,"cache_read_input_tokens":7,"output_tokens":1}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type": "ping"}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi \"x\""}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}"#,
        r#"{"type":"message_stop"}"#,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        r#"{"type":"x","message":null,"index":null,"delta":null,"usage":null}"#,
        r#"{"type":"x","message":{"id":1}}"#,
    ];
    let left = [
        r#"{"type":"x","index":4294967296}"#,
        r#"{"type":"x","index":-1}"#,
        r#"{"type":"x","type":"y"}"#,
        r#"{"\u0074ype":"message_stop"}"#,
        r#"{"type":"x","delta":{"text":7}}"#,
        r#"{"type":"x","usage":{"output_tokens":1.5}}"#,
        r#"{"type":"x"}x"#,
    ];
    let debug = |view: Option<&EventView<'_>>| format!("{view:?}");
    for event in sent.iter().chain(&left) {
        let scanned = EventView::scan(event.as_bytes());
        assert_eq!(scanned.is_some(), sent.contains(event), "{event}");
        let theirs = serde_json::from_str::<EventView<'_>>(event).ok();
        let ours = EventView::read(event.as_bytes());
        let message = ours.as_ref().and_then(|v| v.message(event.as_bytes()));
        let ours = ours.map(EventView::into_serde_view);
        assert_eq!(debug(ours.as_ref()), debug(theirs.as_ref()), "{event}");
        if let Some(raw) = ours.and_then(|v| v.message) {
            let theirs = serde_json::from_slice::<MessageView>(raw.0).ok();
            assert_eq!(format!("{message:?}"), format!("{theirs:?}"), "{raw:?}");
            let alone = MessageView::read(raw);
            assert_eq!(format!("{alone:?}"), format!("{theirs:?}"), "{raw:?}");
        }
    }
    let start = EventView::scan(sent[0].as_bytes()).unwrap();
    let message = MessageView::read(start.message.unwrap()).unwrap();
    assert_eq!(message.id.as_deref(), Some("msg_1"));
    assert_eq!(
        message.usage.map(|u| u.usage()),
        Some(Usage {
            cache_read_tokens: 7,
            ..Usage::new(32, 1)
        })
    );
    let id_number = MessageView::read(Raw(br#"{"id":1,"model":"m"}"#));
    assert!(id_number.is_none(), "serde_json's reading: no message");
}

/// A `message_start`'s message is read in the event's own pass; one the scanner does not
/// take in that pass (a key written with an escape) is read on its own, to the same
/// message.
#[test]
fn a_message_is_read_in_its_events_pass() {
    let plain = br#"{"type":"message_start","message":{"id":"msg_1","model":"claude-x","usage":{"input_tokens":3}}}"#;
    let escaped = br#"{"type":"message_start","message":{"\u0069d":"msg_1","model":"claude-x","usage":{"input_tokens":3}}}"#;
    let id_and_count = |data: &[u8]| {
        let view = EventView::scan(data).unwrap();
        let message = view.message(data).unwrap();
        let count = message.usage.map(|u| u.usage().prompt_tokens);
        (view.message_fields.is_some(), message.id, count)
    };
    assert_eq!(
        id_and_count(plain),
        (true, Some("msg_1".to_owned()), Some(3))
    );
    assert_eq!(
        id_and_count(escaped),
        (false, Some("msg_1".to_owned()), Some(3))
    );
    let mut t = ChunkTracker::for_dialect(Dialect::Anthropic, false);
    t.on_event(&SseEvent::new(
        Some("message_start".to_owned()),
        Bytes::from_static(plain),
    ));
    assert_eq!(t.stream_id(), Some("msg_1"));
}

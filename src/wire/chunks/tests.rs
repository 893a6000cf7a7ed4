//! The OpenAI chunk tracker's tests, and what the trackers' tests share.

use super::*;

/// What an action passed on, as text (or the action itself when it passed nothing on); the
/// Anthropic and Responses trackers' tests use it too.
pub(super) fn forwarded(action: ChunkAction) -> String {
    match action {
        ChunkAction::Forward(b) => String::from_utf8_lossy(&b).into_owned(),
        other => format!("{other:?}"),
    }
}

fn ev(data: &str) -> SseEvent {
    SseEvent::new(None, Bytes::copy_from_slice(data.as_bytes()))
}

#[test]
fn a_chunk_scanned_reads_as_serde_json_reads_it() {
    let chunks = [
        r#"{"id":"c1","model":"m","created":1,"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"Hi \"there\"\n"},"finish_reason":null}]}"#,
        r#"{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b","refusal":null}}]}"#,
        r#"{"choices":[{"delta":{"content":null,"refusal":"no"}}]}"#,
        r#"{"choices":[{"delta":{"content":[{"type":"text"}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":null,"function_call":{"name":"f"}}}]}"#,
        r#"{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":null}"#,
        r#"{"choices":[{"delta":null,"finish_reason":"length"}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":"x"}}"#,
        r#"{"usage":{"prompt_tokens":3},"error":null}"#,
        r#"{"object":"chat.completion.chunk"}"#,
        r#" { "choices" : [ { "delta" : { "content" : "x" } } ] } "#,
        r#"{"id":null,"model":"\u00e9","created":null,"choices":[]}"#,
        r#"{"id":7,"choices":[]}"#,
        r#"{"id":"c","created":1.5,"choices":[]}"#,
        r#"{"id":"c","created":-1,"choices":[]}"#,
        r#"{"model":"\ud800","choices":[]}"#,
    ];
    for chunk in chunks {
        for capture in [false, true] {
            let scanned = ChunkRead::scan(chunk.as_bytes(), capture);
            let scanned = scanned.unwrap_or_else(|| panic!("not scanned: {chunk}"));
            let parsed = ChunkRead::parse(chunk.as_bytes(), capture);
            assert_eq!(Some(scanned), parsed, "{chunk}");
        }
        let identity = serde_json::from_str::<ChunkMeta>(chunk).ok();
        assert_eq!(ChunkMeta::read(chunk.as_bytes()), identity, "{chunk}");
    }
    // The identity is read only in the form serde_json reads.
    let meta = |chunk: &str| ChunkMeta::read(chunk.as_bytes());
    let first = meta(chunks[0]).unwrap();
    assert_eq!(
        (first.id.as_deref(), first.model.as_deref(), first.created),
        (Some("c1"), Some("m"), Some(1))
    );
    assert_eq!(meta(chunks[14]).unwrap().model.as_deref(), Some("\u{e9}"));
    assert!(chunks[15..].iter().all(|c| meta(c).is_none()));
    // What the scan leaves to serde_json: read the same, or refused.
    let unusual = [
        r#"{"choices":null}"#,
        r#"{"choices":[{"delta":{"content":"x"},"finish_reason":7}]}"#,
        r#"{"choices":[{"delta":"x"}]}"#,
        r#"{"choices":[{"delta":{"content":"x","content":"y"}}]}"#,
        r#"{"choices":[{"finish_reason":"st\u006fp"}]}"#,
        r#"{"error":{"message":"Overloaded"}}"#,
        r#"{"choices":[1]}"#,
        r#"[null,null,null]"#,
    ];
    for chunk in unusual {
        assert_eq!(ChunkRead::scan(chunk.as_bytes(), true), None, "{chunk}");
    }
    let refused = |c: &str| ChunkRead::parse(c.as_bytes(), true).is_none();
    assert!(refused(unusual[1]) && refused(unusual[2]) && refused(unusual[3]));
    let stop = ChunkRead::parse(unusual[4].as_bytes(), true).unwrap();
    assert!(stop.finished);
}

#[test]
fn a_usage_chunk_scanned_reads_as_serde_json_reads_it() {
    for usage in [
        r#"{"prompt_tokens":1200,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":1024,"cache_write_tokens":100,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":2}}"#,
        r#"{"prompt_tokens":3,"prompt_tokens_details":null}"#,
        r#"{"prompt_tokens":3,"prompt_tokens_details":{}}"#,
        r#"{"prompt_tokens":null}"#,
        r#"{"prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":null}}"#,
        r#"{"prompt_tokens":3.5}"#,
        r#"{"prompt_tokens":3,"prompt_tokens":4}"#,
        r#"{"prompt_tokens_details":[1]}"#,
        r#"[3]"#,
    ] {
        let chunk = format!(r#"{{"choices":[],"usage":{usage}}}"#);
        let scanned = ChunkRead::scan(chunk.as_bytes(), false);
        assert_eq!(
            scanned,
            ChunkRead::parse(chunk.as_bytes(), false),
            "{chunk}"
        );
    }
    let chunk = r#"{"choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":1024,"cache_write_tokens":100}}}"#;
    let read = ChunkRead::scan(chunk.as_bytes(), false).unwrap();
    let expected = Usage {
        cache_read_tokens: 1024,
        cache_write_tokens: 100,
        ..Usage::new(1200, 5)
    };
    assert_eq!(read.usage, Some(Some(expected)));
    let usage_at = chunk.find(r#""usage":"#).unwrap() + r#""usage":"#.len();
    assert_eq!(
        Usage::scan(chunk.as_bytes(), usage_at..chunk.len() - 1),
        Some(expected),
        "read by the scanner, not left to serde_json"
    );
}

#[test]
fn the_commit_point_is_the_first_content() {
    let mut t = ChunkTracker::new(false);
    let role = r#"{"id":"c1","model":"m","created":1,"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
    assert!(matches!(t.on_event(&ev(role)), ChunkAction::Forward(_)));
    assert!(!t.committed);
    let text =
        r#"{"id":"c1","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#;
    t.on_event(&ev(text));
    assert!(t.committed && !t.finished);
    let tool = r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0}]}}]}"#;
    let mut t2 = ChunkTracker::new(false);
    t2.on_event(&ev(tool));
    assert!(t2.committed);
}

#[test]
fn usage_chunk_is_kept_only_when_asked_for() {
    let usage = r#"{"choices":[],"usage":{"prompt_tokens":1}}"#;
    let mut t = ChunkTracker::new(false);
    assert!(matches!(t.on_event(&ev(usage)), ChunkAction::Skip));
    assert!(t.usage_seen);
    let mut t = ChunkTracker::new(true);
    assert!(matches!(t.on_event(&ev(usage)), ChunkAction::Forward(_)));
}

#[test]
fn the_usage_chunk_says_what_the_cache_read_and_wrote() {
    let mut t = ChunkTracker::new(true);
    let usage = r#"{"choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":1024,"cache_write_tokens":100,"audio_tokens":0}}}"#;
    t.on_event(&ev(usage));
    assert_eq!(
        t.usage,
        Some(Usage {
            prompt_tokens: 1200,
            completion_tokens: 5,
            cache_read_tokens: 1024,
            cache_write_tokens: 100,
        })
    );
    // Some compatible servers send `null` details.
    let mut t = ChunkTracker::new(true);
    let usage = r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":null}}"#;
    t.on_event(&ev(usage));
    assert_eq!(t.usage, Some(Usage::new(3, 1)));
}

#[test]
fn errors_done_and_garbage() {
    let mut t = ChunkTracker::new(false);
    assert!(matches!(t.on_event(&ev("[DONE]")), ChunkAction::Done));
    assert!(matches!(t.on_event(&ev("{nope")), ChunkAction::Skip));
    assert_eq!(t.malformed, 1);
    match t.on_event(&ev(
        r#"{"error":{"message":"Overloaded","type":"overloaded_error"}}"#,
    )) {
        ChunkAction::Error(m) => assert_eq!(m, "Overloaded"),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn error_tail_says_incomplete() {
    let mut t = ChunkTracker::new(false);
    // The identity is the first chunk's that was read (a malformed one is not read).
    t.on_event(&ev(r#"{"id":"c0","choices":["#));
    t.on_event(&ev(
        r#"{"id":"c9","model":"m1","created":5,"choices":[{"index":0,"delta":{"content":"x"}}]}"#,
    ));
    t.on_event(&ev(
        r#"{"id":"c10","model":"m2","created":6,"choices":[{"index":0,"delta":{"content":"y"}}]}"#,
    ));
    assert_eq!(t.stream_id(), Some("c9"));
    let [finish, error] = <[Bytes; 2]>::try_from(t.error_tail("broken")).unwrap();
    let finish = std::str::from_utf8(&finish).unwrap_or_default();
    assert!(finish.contains(r#""finish_reason":"error""#) && finish.contains(r#""id":"c9""#));
    assert!(finish.contains(r#""model":"m1""#) && finish.contains(r#""created":5"#));
    assert!(std::str::from_utf8(&error)
        .unwrap_or_default()
        .contains("stream_interrupted"));
}

/// A stream's chunks alike but for their values are read by the shape of the first chunk
/// after its commit point, each as a whole reading reads it; a chunk of another shape is read
/// whole.
#[test]
fn chunks_of_one_shape_read_as_whole_ones() {
    let chunk = |text: &str, extra: &str| {
        format!(
            r#"{{"id":"chatcmpl-7","object":"chat.completion.chunk","created":17,"model":"m","choices":[{{"index":0,"delta":{{"content":{text}}},"logprobs":null,"finish_reason":null}}],"usage":null,"obfuscation":"{extra}"}}"#
        )
    };
    let tool = |args: &str| {
        format!(
            r#"{{"id":"c","choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":0,"function":{{"arguments":"{args}"}}}}]}},"finish_reason":null}}]}}"#
        )
    };
    let stream = [
        r#"{"id":"chatcmpl-7","object":"chat.completion.chunk","created":17,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"finish_reason":null}],"usage":null}"#.to_owned(),
        chunk(r#""Hi""#, "x1"),
        chunk(r#""""#, ""),
        chunk(r#"" th\"ere\n""#, "4nRt"),
        chunk(r#""\ud83d\ude00 é""#, "q"),
        chunk(r#""\ud800""#, "q"),
        chunk("null", "q"),
        chunk(r#""not closed"#, "q"),
        chunk(r#""again""#, "q"),
        tool("{\\\"a\\\""),
        tool(":1}"),
        r#"{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}"#.to_owned(),
        r#"{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9}}"#.to_owned(),
    ];
    for capture in [false, true] {
        let mut shaped = ChunkTracker::new(true);
        let mut whole = ChunkTracker::new(true).without_shapes();
        shaped.set_capture(capture);
        whole.set_capture(capture);
        for chunk in &stream {
            let (a, b) = (shaped.on_event(&ev(chunk)), whole.on_event(&ev(chunk)));
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "{chunk}");
            assert_eq!(shaped.observed(), whole.observed(), "{chunk}");
            assert_eq!(shaped.last_text(), whole.last_text(), "{chunk}");
            assert_eq!(shaped.tool_calls_seen, whole.tool_calls_seen, "{chunk}");
            assert_eq!(shaped.usage, whole.usage, "{chunk}");
        }
        assert_eq!(shaped.content_chunks, 7);
        // The texts' shape, the null text's, the texts' again, the tool calls': as many as
        // a stream makes.
        assert_eq!(shaped.shapes, MAX_SHAPES);
        assert_eq!(whole.shapes, MAX_SHAPES);
        assert!(whole.shape.is_none());
    }
    // No shape is made before the commit point (the first text): the chunks up to it are
    // read whole. The shape made of the next text chunk reads the later ones (but the broken
    // one).
    let mut t = ChunkTracker::new(false);
    t.on_event(&ev(&stream[0]));
    t.on_event(&ev(&stream[1]));
    assert!(t.committed && t.shape.is_none() && t.shapes == 0);
    t.on_event(&ev(&stream[2]));
    let Some(Shaped::Chunk(shape)) = t.shape.as_deref() else {
        panic!("no shape made");
    };
    for (n, chunk) in stream.iter().enumerate() {
        let read = shape.read(chunk.as_bytes(), true);
        assert_eq!(read.is_some(), (1..=5).contains(&n) || n == 8, "{chunk}");
    }
}

/// A target's next stream starts with the shapes its last streams made: its first chunk is
/// read by the shape of their first chunks, its first content (the commit point) and the rest
/// by the shape of their content, each as a whole reading reads it. A stream they do not fit
/// makes its own, which the next stream then starts with.
#[test]
fn a_stream_starts_with_the_shapes_its_target_s_last_streams_made() {
    let learned = Arc::new(LearnedShapes::default());
    let role = |id: &str| {
        format!(
            r#"{{"id":"{id}","choices":[{{"index":0,"delta":{{"role":"assistant","content":""}},"finish_reason":null}}]}}"#
        )
    };
    let text = |id: &str, text: &str| {
        format!(
            r#"{{"id":"{id}","choices":[{{"index":0,"delta":{{"content":"{text}"}},"finish_reason":null}}]}}"#
        )
    };
    let kept = |learned: &LearnedShapes| {
        let main = learned.slot(Dialect::OpenAi).load_full();
        (
            main.expect("a shape kept"),
            learned.opening.load_full().expect("an opening kept"),
        )
    };
    // The first stream: nothing kept. Its first chunk's shape is kept as the opening, its
    // content's is made after the commit point and kept.
    let mut first = ChunkTracker::new(false).learning(&learned);
    for chunk in [
        role("a"),
        text("a", "Hi"),
        text("a", " there"),
        text("a", "!"),
    ] {
        first.on_event(&ev(&chunk));
    }
    assert_eq!((first.wholes, first.shapes), (3, 1));
    let (main, opening) = kept(&learned);
    // The next: nothing read whole, no shape made.
    let mut next = ChunkTracker::new(false).learning(&learned);
    let mut whole = ChunkTracker::new(false).without_shapes();
    for chunk in [role("b"), text("b", "Yo"), text("b", "!")] {
        let (a, b) = (next.on_event(&ev(&chunk)), whole.on_event(&ev(&chunk)));
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "{chunk}");
        assert_eq!(next.observed(), whole.observed(), "{chunk}");
    }
    assert_eq!((next.wholes, next.shapes), (0, 0));
    assert!(next.committed && Arc::ptr_eq(next.shape.as_ref().unwrap(), &main));
    assert_eq!(next.stream_id(), Some("b"));
    let (same_main, same_opening) = kept(&learned);
    assert!(Arc::ptr_eq(&same_main, &main) && Arc::ptr_eq(&same_opening, &opening));
    // A stream they do not fit: read whole, and its own shapes kept instead.
    let other = |text: &str| format!(r#"{{"choices":[{{"delta":{{"content":"{text}"}}}}]}}"#);
    let mut third = ChunkTracker::new(false).learning(&learned);
    for chunk in [other("1"), other("2"), other("3")] {
        third.on_event(&ev(&chunk));
    }
    assert_eq!((third.wholes, third.shapes), (2, 1));
    let (new_main, new_opening) = kept(&learned);
    assert!(!Arc::ptr_eq(&new_main, &main) && !Arc::ptr_eq(&new_opening, &opening));
    assert!(Arc::ptr_eq(third.shape.as_ref().unwrap(), &new_main));
    // Each dialect keeps its own.
    assert!(learned.slot(Dialect::Anthropic).load().is_none());
}

/// A stream's last chunks, its finish and its usage, come once a stream: their shapes are kept
/// on the target, and its next streams read them by those shapes, each as a whole reading
/// reads it (its usage's counts included); a finish or a usage they do not fit is read whole
/// and its shape kept instead.
#[test]
fn a_stream_s_finish_and_usage_are_read_by_the_shapes_of_its_target_s_last_streams() {
    let learned = Arc::new(LearnedShapes::default());
    let text = |id: &str, text: &str| {
        format!(
            r#"{{"id":"{id}","choices":[{{"index":0,"delta":{{"content":"{text}"}},"finish_reason":null}}],"usage":null}}"#
        )
    };
    let finish = |id: &str, why: &str| {
        format!(
            r#"{{"id":"{id}","choices":[{{"index":0,"delta":{{}},"finish_reason":{why}}}],"usage":null}}"#
        )
    };
    let usage = |id: &str, counts: &str| {
        format!(r#"{{"id":"{id}","choices":[],"usage":{{"prompt_tokens":{counts}}}}}"#)
    };
    let details = r#"3,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":2}"#;
    let stream = |id: &str, why: &str, counts: &str| {
        [
            text(id, ""),
            text(id, "Hi"),
            text(id, "!"),
            finish(id, why),
            usage(id, counts),
        ]
    };
    // The first stream reads its finish and usage whole and keeps their shapes.
    let mut first = ChunkTracker::new(true).learning(&learned);
    for chunk in stream("a", r#""stop""#, details) {
        first.on_event(&ev(&chunk));
    }
    assert_eq!(first.usage.map(|u| u.cache_read_tokens), Some(2));
    let wholes = first.wholes;
    assert!(learned.closing.iter().all(|slot| slot.load().is_some()));
    // A stream read with the kept shapes, each chunk as a whole reading reads it.
    let read_alike = |chunks: [String; 5], wants_usage: bool| {
        let mut next = ChunkTracker::new(wants_usage).learning(&learned);
        let mut whole = ChunkTracker::new(wants_usage).without_shapes();
        for chunk in chunks {
            let (a, b) = (next.on_event(&ev(&chunk)), whole.on_event(&ev(&chunk)));
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "{chunk}");
            assert_eq!(next.observed(), whole.observed(), "{chunk}");
        }
        next
    };
    // The next streams read nothing whole, their values other than the first's.
    let details = r#"31,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":20}"#;
    for (why, counts, wants_usage) in [
        (r#""length""#, details, true),
        (r#""tool_calls""#, details, false),
    ] {
        let next = read_alike(stream("b", why, counts), wants_usage);
        assert_eq!(next.wholes, 0, "{why}");
        assert!(next.finished && next.usage_seen);
        assert_eq!(
            next.usage.map(|u| (u.prompt_tokens, u.cache_read_tokens)),
            Some((31, 20))
        );
    }
    // A finish the scanner leaves to serde_json (an escape), a count that is not a whole
    // number, a usage of another shape: each read whole, as the whole reading reads it.
    for (why, counts) in [
        (r#""st\u006fp""#, details),
        (
            r#""stop""#,
            r#"3.5,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":1}"#,
        ),
        (r#""stop""#, r#"3,"completion_tokens":7}"#),
    ] {
        let next = read_alike(stream("c", why, counts), true);
        assert!(next.wholes >= 1 && next.wholes < wholes, "{why} {counts}");
    }
}

use super::*;

fn all(dec: &mut SseDecoder) -> Vec<SseEvent> {
    std::iter::from_fn(|| dec.next_event()).collect()
}

#[test]
fn decodes_split_events_and_line_endings() {
    let mut dec = SseDecoder::new();
    dec.push(b"data: {\"a\":1}\n\nda");
    assert_eq!(all(&mut dec).len(), 1);
    dec.push(b"ta: x\r");
    assert!(all(&mut dec).is_empty());
    dec.push(b"\n\r\n: keep-alive\n\nevent: ping\ndata: 1\ndata: 2\n\n");
    let evs = all(&mut dec);
    assert_eq!(evs.len(), 2);
    assert_eq!(evs[0].data, Bytes::from_static(b"x"));
    assert_eq!(evs[0].event, None);
    assert_eq!(evs[1].event.as_deref(), Some("ping"));
    assert_eq!(evs[1].data, Bytes::from_static(b"1\n2"));
}

/// The names Anthropic and the Responses API send are static texts, whichever way the
/// event is read; others are read as they came (lossily when not UTF-8).
#[test]
fn known_event_names_are_not_read_anew() {
    let mut dec = SseDecoder::new();
    dec.push(b"event: content_block_delta\ndata: {}\n\n");
    dec.push(b"event: response.completed\n: a comment\ndata: {}\n\n");
    dec.push(b"event: custom\ndata: {}\n\nevent: other\r\ndata: {}\r\n\r\n");
    dec.push(b"event: \xffx\ndata: {}\n\nevent: response.created \ndata: 1\n\n");
    let events = all(&mut dec);
    let names: Vec<_> = events
        .iter()
        .map(|e| {
            (
                e.event.as_deref(),
                matches!(e.event, Some(Cow::Borrowed(_))),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            (Some("content_block_delta"), true),
            (Some("response.completed"), true),
            (Some("custom"), false),
            (Some("other"), false),
            (Some("\u{fffd}x"), false),
            (Some("response.created "), false),
        ]
    );
    assert!(
        events[0].raw.is_some() && events[1].raw.is_none(),
        "both ways"
    );
}

/// Events in the written form and others (a comment, CR line ends, other fields, data over
/// several lines).
const MIXED: &[u8] = b"data: {\"a\":1}\n\nevent: ping\ndata: {}\n\n: keep\n\ndata: x\r\n\r\n\
    event:e\ndata: y\n\nid: 1\ndata: z\n\ndata: p\ndata: q\n\ndata: last\n\n";

/// Events as what the tests compare: their names and data.
fn read(events: &[SseEvent]) -> Vec<(Option<Cow<'static, str>>, Bytes)> {
    events
        .iter()
        .map(|e| (e.event.clone(), e.data.clone()))
        .collect()
}

/// An event in the form the gateway writes is taken whole and kept as it came; any other
/// is read line by line; either way the events are the same wherever the bytes are cut.
#[test]
fn events_in_the_written_form_are_kept_as_they_came() {
    let stream = MIXED;
    let mut dec = SseDecoder::new();
    dec.push(stream);
    let whole = all(&mut dec);
    let named =
        |name: &str, data: &'static [u8]| (Some(Cow::Owned(name.to_owned())), Bytes::from(data));
    let bare = |data: &'static [u8]| (None, Bytes::from(data));
    assert_eq!(
        read(&whole),
        vec![
            bare(b"{\"a\":1}"),
            named("ping", b"{}"),
            bare(b"x"),
            named("e", b"y"),
            bare(b"z"),
            bare(b"p\nq"),
            bare(b"last"),
        ]
    );
    let raws: Vec<_> = whole.iter().map(|e| e.raw.as_deref()).collect();
    assert_eq!(
        raws,
        vec![
            Some(&b"data: {\"a\":1}\n\n"[..]),
            Some(b"event: ping\ndata: {}\n\n"),
            None,
            None,
            None,
            None,
            Some(b"data: last\n\n"),
        ]
    );
    // Framed with its own name, a raw event is what it came as; with another, it is
    // framed anew.
    assert_eq!(
        &whole[1].framed(Some("ping"))[..],
        b"event: ping\ndata: {}\n\n"
    );
    assert_eq!(&whole[1].framed(None)[..], b"data: {}\n\n");
    assert_eq!(&whole[3].framed(Some("e"))[..], b"event: e\ndata: y\n\n");
    for cut in 0..=stream.len() {
        let mut dec = SseDecoder::new();
        dec.push(&stream[..cut]);
        let mut events = all(&mut dec);
        dec.push(&stream[cut..]);
        events.extend(all(&mut dec));
        assert_eq!(read(&events), read(&whole), "cut at {cut}");
        for e in &events {
            if let Some(raw) = &e.raw {
                assert_eq!(raw, &frame(e.event.as_deref(), &e.data), "cut at {cut}");
            }
        }
    }
}

/// Bytes pushed as they came have the whole events they start with split off them, not copied;
/// wherever the bytes are cut, and whether pushed as they came or copied, the events are the
/// same.
#[test]
fn whole_events_are_split_off_the_bytes_pushed_as_they_came() {
    let mut dec = SseDecoder::new();
    dec.push(MIXED);
    let whole = read(&all(&mut dec));

    let pushed = Bytes::from_static(MIXED);
    let mut dec = SseDecoder::new();
    dec.push_bytes(pushed.clone());
    let events = all(&mut dec);
    assert_eq!(read(&events), whole);
    let within = |b: &Bytes| pushed.as_ptr_range().contains(&b.as_ptr());
    assert!(within(events[0].raw.as_ref().expect("in the written form")));
    assert!(within(&events[1].data));

    let n = MIXED.len();
    for a in 0..=n {
        for b in a..=n {
            // Pushed as they came, in three pieces.
            let mut dec = SseDecoder::new();
            let mut events = Vec::new();
            for (from, to) in [(0, a), (a, b), (b, n)] {
                dec.push_bytes(pushed.slice(from..to));
                events.extend(all(&mut dec));
            }
            assert_eq!(read(&events), whole, "cut at {a} and {b}");
            // The middle piece copied, the others as they came, nothing read in between.
            let mut dec = SseDecoder::new();
            dec.push_bytes(pushed.slice(..a));
            dec.push(&MIXED[a..b]);
            dec.push_bytes(pushed.slice(b..));
            assert_eq!(read(&all(&mut dec)), whole, "cut at {a} and {b}, mixed");
        }
    }
}

#[test]
fn a_blank_line_without_data_dispatches_nothing() {
    let mut dec = SseDecoder::new();
    dec.push(b"event: x\n\n\n\ndata:y\n\n");
    let evs = all(&mut dec);
    assert_eq!(evs.len(), 1);
    assert_eq!(evs[0].event, None);
    assert_eq!(evs[0].data, Bytes::from_static(b"y"));
}

#[test]
fn an_event_over_its_bound_ends_the_decoding_with_one_error_event() {
    let counter = Arc::new(AtomicU64::new(0));
    let mut dec = SseDecoder::counting(counter.clone());
    dec.push(b"data: {\"a\":1}\n\n");
    assert_eq!(all(&mut dec).len(), 1);
    let line = format!("data: {}\n", "x".repeat(1 << 20));
    for _ in 0..3 {
        dec.push(line.as_bytes());
        assert!(all(&mut dec).is_empty());
    }
    assert!(!dec.overflowed(), "3 MiB so far");
    dec.push(line.as_bytes());
    dec.push(b"\n");
    let evs = all(&mut dec);
    assert_eq!(evs.len(), 1);
    assert_eq!(evs[0].data, Bytes::from_static(OVERFLOW));
    assert_eq!(evs[0].event.as_deref(), Some("error"));
    assert!(dec.overflowed());
    assert_eq!(counter.load(Ordering::Relaxed), 1);
    dec.push(b"data: {\"b\":2}\n\n");
    assert!(all(&mut dec).is_empty(), "the rest is ignored");
    assert!(dec.buf.is_empty() && dec.data.is_empty(), "nothing held");
}

#[test]
fn a_line_over_its_bound_ends_the_decoding_whether_or_not_it_ends() {
    let mut dec = SseDecoder::new();
    dec.push(&vec![b'x'; MAX_LINE + 1]);
    assert_eq!(all(&mut dec).len(), 1);
    let mut dec = SseDecoder::new();
    let mut long = vec![b'x'; MAX_LINE + 1];
    long.extend_from_slice(b"\n\n");
    dec.push(&long);
    assert_eq!(all(&mut dec)[0].data, Bytes::from_static(OVERFLOW));
}

#[test]
fn json_written_as_an_event_is_one_data_line() {
    let raw: Box<serde_json::value::RawValue> =
        serde_json::from_str("{\r\n\"a\":\r\r[1,\n2]}").unwrap();
    let mut out = b"x".to_vec();
    assert!(write_json(&mut out, Some("e"), &raw));
    assert_eq!(&out[..], b"xevent: e\ndata: {  \"a\":  [1, 2]}\n\n");
    let mut dec = SseDecoder::new();
    dec.push(&out[1..]);
    let evs = all(&mut dec);
    assert_eq!(evs.len(), 1);
    let back: serde_json::Value = serde_json::from_slice(&evs[0].data).unwrap();
    assert_eq!(back, serde_json::json!({"a": [1, 2]}));
    let mut out = Vec::new();
    assert!(write_json(&mut out, None, &"line\nbreak"));
    assert_eq!(
        &out[..],
        b"data: \"line\\nbreak\"\n\n",
        "strings keep their escapes"
    );
}

#[test]
fn data_over_several_lines_goes_out_as_it_came_in() {
    let mut dec = SseDecoder::new();
    dec.push(b"event: e\ndata: {\"a\":\ndata: 1}\n\ndata: x\ndata:\ndata: y\n\n");
    let evs = all(&mut dec);
    assert_eq!(evs[0].data, Bytes::from_static(b"{\"a\":\n1}"));
    let framed = encode_event("e", &evs[0].data);
    assert_eq!(&framed[..], b"event: e\ndata: {\"a\":\ndata: 1}\n\n");
    let framed = encode_data(&evs[1].data);
    assert_eq!(&framed[..], b"data: x\ndata: \ndata: y\n\n");
    let mut again = SseDecoder::new();
    again.push(&framed);
    assert_eq!(all(&mut again)[0].data, evs[1].data);
    assert_eq!(decode_data(&framed), evs[1].data);
    let looks_framed = Bytes::from_static(b"data: x\ndata: y");
    assert_eq!(decode_data(&encode_data(&looks_framed)), looks_framed);
    assert_eq!(
        &encode_data(b"a\r\nb\rc")[..],
        b"data: a\ndata: b\ndata: c\n\n"
    );
}

#[test]
fn encodes_data_events() {
    assert_eq!(&encode_data(b"[DONE]")[..], b"data: [DONE]\n\n");
    assert_eq!(&decode_data(&encode_data(b"{}"))[..], b"{}");
    assert_eq!(
        &encode_event("ping", b"{}")[..],
        b"event: ping\ndata: {}\n\n"
    );
}

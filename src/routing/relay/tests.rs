use super::*;

fn chunks(n: usize) -> Vec<Result<Bytes, crate::provider::BoxError>> {
    (0..n)
        .map(|_| Ok(Bytes::from_static(b"data: [DONE]\n\n")))
        .collect()
}

const CHUNK: &str =
    "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n";

/// A relay of a one-target route's committed stream, its head one chunk, reading `upstream`.
fn relayed(upstream: ByteStream) -> RelayStream {
    let route = crate::routing::tests::route(r#"{ provider = "p", model = "m" }"#, "");
    let now = Instant::now();
    let ctx = RelayContext {
        request_id: "req".into(),
        route,
        target_idx: 0,
        picked: Picked::Priority,
        attempt_start: now,
        span: 0,
        request_start: now,
        deadline: now + Duration::from_secs(60),
        continuation: None,
        report: None,
    };
    let committed = Committed {
        upstream,
        decoder: SseDecoder::new(),
        tracker: ChunkTracker::new(false),
        head: vec![Bytes::from_static(CHUNK.as_bytes())],
        head_text: String::new(),
    };
    relay_stream(committed, ctx)
}

fn poll(stream: &mut RelayStream) -> Poll<Option<Bytes>> {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    stream
        .poll_next_unpin(&mut cx)
        .map(|item| item.map(|bytes| bytes.unwrap_or_else(|e| match e {})))
}

/// The events one upstream read brings go on as one piece, the head before them and the
/// stream's end after them included; bytes not there yet are not waited for.
#[tokio::test(start_paused = true)]
async fn the_events_ready_together_go_on_as_one_piece() {
    let read = format!("{CHUNK}{CHUNK}data: [DONE]\n\n");
    let whole = futures_util::stream::iter([Ok(Bytes::from(read.clone()))]).boxed();
    let mut stream = relayed(whole);
    let Poll::Ready(Some(piece)) = poll(&mut stream) else {
        panic!("nothing ready");
    };
    assert_eq!(piece, format!("{CHUNK}{read}"));
    assert_eq!(poll(&mut stream), Poll::Ready(None));

    let more = futures_util::stream::pending();
    let arriving = futures_util::stream::iter([Ok(Bytes::from(format!("{CHUNK}{CHUNK}")))])
        .chain(more)
        .boxed();
    let mut stream = relayed(arriving);
    let Poll::Ready(Some(piece)) = poll(&mut stream) else {
        panic!("nothing ready");
    };
    assert_eq!(piece, CHUNK.repeat(3));
    assert_eq!(poll(&mut stream), Poll::Pending);

    // A piece stays within its bound: an event that would not fit goes on alone.
    let long = CHUNK.replace("hi", &"x".repeat(GATHER));
    let read = format!("{CHUNK}{long}data: [DONE]\n\n");
    let mut stream = relayed(futures_util::stream::iter([Ok(Bytes::from(read))]).boxed());
    let pieces: Vec<_> = std::iter::from_fn(|| match poll(&mut stream) {
        Poll::Ready(piece) => piece,
        Poll::Pending => panic!("the stream waits with everything read"),
    })
    .collect();
    assert_eq!(pieces, [CHUNK.repeat(2), long, "data: [DONE]\n\n".into()]);
}

#[test]
fn a_body_already_read_to_its_end_is_drained_in_place() {
    let mut rest: ByteStream = futures_util::stream::iter(chunks(2)).boxed();
    assert!(drained_now(&mut rest));
    // Ended, or broken: either way nothing is left to wait for.
    let broken = vec![Err("reset".into())];
    let mut rest: ByteStream = futures_util::stream::iter(broken).boxed();
    assert!(drained_now(&mut rest));
}

#[test]
fn a_body_still_arriving_is_left_to_a_task() {
    let more = futures_util::stream::pending();
    let mut rest: ByteStream = futures_util::stream::iter(chunks(1)).chain(more).boxed();
    assert!(!drained_now(&mut rest));
    // A body that keeps delivering is not read without end in the client's task.
    let mut rest: ByteStream = futures_util::stream::iter(chunks(100)).boxed();
    assert!(!drained_now(&mut rest));
}

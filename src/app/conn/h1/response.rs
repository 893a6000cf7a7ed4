//! Writing a response head and a chunk's size line.

use std::time::SystemTime;

use http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
use http::StatusCode;

use crate::api::Stamp;

/// `size\r\n` of a chunk, in hex.
pub(super) fn chunk_size(out: &mut [u8; 18], mut n: usize) -> &[u8] {
    let mut at = 16;
    out[16] = b'\r';
    out[17] = b'\n';
    loop {
        at -= 1;
        out[at] = b"0123456789abcdef"[n & 0xf];
        n >>= 4;
        if n == 0 {
            return &out[at..];
        }
    }
}

/// The status line and fields of a response and its gateway fields (`stamp`), with its framing
/// (`content-length` of `length`, else chunked) and `date` unless it has its own.
pub(super) fn encode_head(
    head: &mut Vec<u8>,
    parts: &http::response::Parts,
    stamp: Option<Stamp>,
    bodiless: bool,
    length: Option<u64>,
    close: bool,
) {
    head.clear();
    if parts.status == StatusCode::OK {
        head.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    } else {
        head.extend_from_slice(b"HTTP/1.1 ");
        head.extend_from_slice(parts.status.as_str().as_bytes());
        head.push(b' ');
        head.extend_from_slice(parts.status.canonical_reason().unwrap_or("").as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    let mut dated = false;
    for (name, value) in &parts.headers {
        if name == CONTENT_LENGTH || name == TRANSFER_ENCODING || name == CONNECTION {
            continue; // the framing and the connection are ours to say
        }
        dated |= name == DATE;
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if let Some(stamp) = stamp {
        stamp.write(head);
    }
    if !dated {
        date(head);
    }
    if !bodiless {
        match length {
            Some(n) => {
                head.extend_from_slice(b"content-length: ");
                head.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
                head.extend_from_slice(b"\r\n");
            }
            None => head.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        }
    }
    if close {
        head.extend_from_slice(b"connection: close\r\n");
    }
    head.extend_from_slice(b"\r\n");
}

/// `date: ...\r\n` onto a head: the current second's, formatted once per second per thread.
fn date(head: &mut Vec<u8>) {
    thread_local! {
        static DATE: std::cell::RefCell<(u64, String)> = const {
            std::cell::RefCell::new((0, String::new()))
        };
    }
    let now = SystemTime::now();
    let second = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    DATE.with_borrow_mut(|(at, text)| {
        if *at != second || text.is_empty() {
            *at = second;
            *text = httpdate::fmt_http_date(now);
        }
        head.extend_from_slice(b"date: ");
        head.extend_from_slice(text.as_bytes());
        head.extend_from_slice(b"\r\n");
    });
}

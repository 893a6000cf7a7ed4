//! A response head: parsed once for what the connection needs (status, framing, whether it
//! can be kept) and kept as it came; its fields are made into a `HeaderMap` only when asked.
//! A call that reads none of them (a whole answer, on a target that does not watch its rate
//! limits) builds none: parsing every field into a map was ~2,500 instructions a call.

use std::mem::MaybeUninit;
use std::ops::Range;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use super::body::Framing;
use super::{Error, MAX_FIELDS};
use crate::wire::scan::whole_number;

/// A response head as it came.
#[derive(Debug, Clone)]
pub(crate) struct RawHead {
    bytes: Bytes,
    /// Where the (last) `content-type` value lies in `bytes`.
    content_type: Option<Range<usize>>,
}

impl RawHead {
    /// The `content-type`, when there is one.
    pub(crate) fn content_type(&self) -> Option<&[u8]> {
        self.content_type.clone().map(|r| &self.bytes[r])
    }

    /// The header fields, as a map sharing the head's bytes (a field no `HeaderMap` can hold
    /// is left out).
    pub(crate) fn map(&self) -> HeaderMap {
        let mut fields = [const { MaybeUninit::uninit() }; MAX_FIELDS];
        let (resp, parsed) = read(&self.bytes, &mut fields);
        let mut map = HeaderMap::new();
        if parsed.is_err() {
            return map;
        }
        map.reserve(resp.headers.len());
        for f in resp.headers.iter() {
            let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(f.name.as_bytes()),
                HeaderValue::from_maybe_shared(self.bytes.slice_ref(f.value)),
            ) else {
                continue;
            };
            map.append(name, value);
        }
        map
    }
}

/// A final or informational head, with how its body is framed and whether the connection can
/// take another request after it.
#[derive(Debug)]
pub(super) struct Parsed {
    pub(super) status: StatusCode,
    pub(super) head: RawHead,
    pub(super) framing: Framing,
    pub(super) reuse: bool,
}

/// Parse a response head from the start of `buf`, taking it out of `buf`: `None` while it is
/// incomplete. `head_only`: the answer to a `HEAD` request (no body, whatever the head says).
/// The framing follows RFC 9112 section 6.3.
pub(super) fn parse(buf: &mut BytesMut, head_only: bool) -> Result<Option<Parsed>, Error> {
    let mut fields = [const { MaybeUninit::uninit() }; MAX_FIELDS];
    let (resp, parsed) = read(buf, &mut fields);
    let len = match parsed {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Error::Invalid("over 128 header fields"))
        }
        Err(httparse::Error::Version) => return Err(Error::Invalid("not HTTP/1")),
        Err(_) => return Err(Error::Invalid("a malformed head")),
    };
    let status = StatusCode::from_u16(resp.code.unwrap_or(0))
        .map_err(|_| Error::Invalid("a status code"))?;
    let http11 = resp.version == Some(1);
    let (mut close, mut keep_alive) = (false, false);
    let mut length = None;
    let mut encoded = false;
    let mut chunked = false;
    let mut content_type = None;
    let base = buf.as_ptr() as usize;
    for f in resp.headers.iter() {
        let name = f.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            for part in f.value.split(|&b| b == b',') {
                let n =
                    whole_number(part.trim_ascii()).ok_or(Error::Invalid("a content-length"))?;
                if length.is_some_and(|l| l != n) {
                    return Err(Error::Invalid("content-lengths that differ"));
                }
                length = Some(n);
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            encoded = true;
            // Whether `chunked` is the last coding, in the last field.
            chunked = f
                .value
                .rsplit(|&b| b == b',')
                .next()
                .is_some_and(|coding| coding.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in f.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case(b"content-type") {
            let at = f.value.as_ptr() as usize - base;
            content_type = Some(at..at + f.value.len());
        }
    }
    // HTTP/1.1 keeps a connection unless told to close; HTTP/1.0 closes unless told to keep.
    let mut reuse = !close && (http11 || keep_alive);
    let framing = if head_only
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
        || status.is_informational()
    {
        Framing::Length(0)
    } else if encoded {
        if length.is_some() {
            // Both: the length is ignored, and the connection not trusted again.
            reuse = false;
        }
        if chunked {
            Framing::chunked()
        } else {
            reuse = false;
            Framing::Close
        }
    } else if let Some(len) = length {
        Framing::Length(len)
    } else {
        reuse = false;
        Framing::Close
    };
    let bytes = buf.split_to(len).freeze();
    Ok(Some(Parsed {
        status,
        head: RawHead {
            bytes,
            content_type,
        },
        framing,
        reuse,
    }))
}

/// httparse's reading of the response head at the start of `buf`, its fields into `fields`.
fn read<'h, 'b>(
    buf: &'b [u8],
    fields: &'h mut [MaybeUninit<httparse::Header<'b>>],
) -> (httparse::Response<'h, 'b>, httparse::Result<usize>) {
    let mut resp = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, buf, fields);
    (resp, parsed)
}

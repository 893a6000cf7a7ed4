//! Reading a request head: what [`super`] serves itself, and the `http::Request` parts of it.

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Uri};

use super::MAX_FIELDS;
use crate::api::{headers, ClientApi};
use crate::wire::scan::whole_number;

/// A request head served here: its length, method, target and body length; its fields are in
/// [`super::Conn`]'s `fields`.
#[derive(Debug)]
pub(super) struct Head {
    pub(super) len: usize,
    pub(super) method: Method,
    pub(super) target: (usize, usize),
    pub(super) body: usize,
    /// The client asked for the connection to be closed after the answer (`connection:
    /// close`).
    pub(super) close: bool,
}

/// A field of a head: its name (one of [`KNOWN_NAMES`], or where it is in the head) and where
/// its value is. A name is made a `HeaderName` only for a request that is given it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Field {
    pub(super) known: Option<Known>,
    pub(super) name: (usize, usize),
    pub(super) value: (usize, usize),
}

/// What [`parse`] made of the bytes read.
#[derive(Debug)]
pub(super) enum Parse {
    Partial,
    Head(Head),
    /// hyper's to serve (or to refuse).
    Hyper,
}

/// The longest field name `http` takes.
const MAX_NAME: usize = u16::MAX as usize;

/// Parse the request head at the start of `buf`: its fields into `fields`, each with its
/// name's and value's places in `buf`.
pub(super) fn parse(buf: &[u8], fields: &mut Vec<Field>, max_body: usize) -> Parse {
    // Left uninitialised: the parse writes what it finds (3.2 KB not zeroed per parse).
    let mut slots = [const { std::mem::MaybeUninit::uninit() }; MAX_FIELDS];
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(buf, &mut slots) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parse::Partial,
        Err(_) => return Parse::Hyper,
    };
    if req.version != Some(1) {
        return Parse::Hyper;
    }
    let method = match req.method.unwrap_or_default() {
        "POST" => Method::POST,
        "GET" => Method::GET,
        "HEAD" | "CONNECT" => return Parse::Hyper,
        other => match Method::from_bytes(other.as_bytes()) {
            Ok(method) => method,
            Err(_) => return Parse::Hyper,
        },
    };
    let target = req.path.unwrap_or_default();
    if !target.starts_with('/') {
        return Parse::Hyper;
    }
    let base = buf.as_ptr() as usize;
    let at = |s: &[u8]| {
        let start = s.as_ptr() as usize - base;
        (start, start + s.len())
    };
    fields.clear();
    let mut body = None;
    let mut close = false;
    for field in &*req.headers {
        let name = field.name.as_bytes();
        let known = known_name(name);
        if known == Some(Known::ContentLength) {
            // Digits only, as hyper reads it.
            let length = whole_number(field.value).and_then(|n| usize::try_from(n).ok());
            match (body, length) {
                (None, Some(n)) if n <= max_body => body = Some(n),
                _ => return Parse::Hyper,
            }
        } else if known == Some(Known::Connection) {
            // `close`: answered, then closed, as hyper does; any other option is hyper's.
            if field.value.eq_ignore_ascii_case(b"close") {
                close = true;
            } else if !field.value.eq_ignore_ascii_case(b"keep-alive") {
                return Parse::Hyper;
            }
        } else if known.is_none()
            && (name.eq_ignore_ascii_case(b"transfer-encoding")
                || name.eq_ignore_ascii_case(b"expect")
                || name.eq_ignore_ascii_case(b"upgrade")
                || name.len() > MAX_NAME)
        {
            // (httparse takes a name of token bytes, as `http` does, of any length.)
            return Parse::Hyper;
        }
        fields.push(Field {
            known,
            name: at(name),
            value: at(field.value),
        });
    }
    Parse::Head(Head {
        len,
        method,
        target: at(target.as_bytes()),
        body: body.unwrap_or(0),
        close,
    })
}

/// The field names clients send most, and those the client API reads ([`headers::READ`]),
/// each [`Known`]'s at its place.
static KNOWN_NAMES: [HeaderName; 17] = [
    header::HOST,
    header::ACCEPT,
    header::USER_AGENT,
    header::CONTENT_TYPE,
    header::AUTHORIZATION,
    header::CONTENT_LENGTH,
    header::ACCEPT_ENCODING,
    HeaderName::from_static("x-api-key"),
    HeaderName::from_static("anthropic-version"),
    HeaderName::from_static("anthropic-beta"),
    header::CONNECTION,
    crate::wire::trace::TRACEPARENT,
    header::ORIGIN,
    HeaderName::from_static("openai-beta"),
    headers::FAILOVER,
    headers::TIMEOUT,
    crate::wire::session::HEADER,
];

/// A field name of [`KNOWN_NAMES`], by its place there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Known {
    Host,
    Accept,
    UserAgent,
    ContentType,
    Authorization,
    ContentLength,
    AcceptEncoding,
    XApiKey,
    AnthropicVersion,
    AnthropicBeta,
    Connection,
    Traceparent,
    Origin,
    OpenAiBeta,
    Failover,
    Timeout,
    Session,
}

impl Known {
    /// The name as `http` has it.
    pub(super) fn name(self) -> &'static HeaderName {
        &KNOWN_NAMES[self as usize]
    }

    /// Whether the client API reads it: one of [`headers::READ`] (a test checks them).
    pub(super) fn read_by_client_api(self) -> bool {
        matches!(
            self,
            Known::Host
                | Known::Origin
                | Known::Authorization
                | Known::XApiKey
                | Known::Failover
                | Known::Timeout
                | Known::Session
                | Known::Traceparent
                | Known::AnthropicBeta
                | Known::AnthropicVersion
                | Known::OpenAiBeta
        )
    }
}

/// Which of [`KNOWN_NAMES`] the field name `name` (a token, as httparse takes it) is, in any
/// case: found by its length and first letter, then compared once. `HeaderName::from_bytes`
/// lowercases a name into a scratch buffer, matches it against every standard name and
/// allocates one it does not know (~120 instructions a field, `bench/instructions`), and a
/// request's fields are mostly these.
pub(super) fn known_name(name: &[u8]) -> Option<Known> {
    let known = match (name.len(), name.first()? | 0x20) {
        (4, b'h') => Known::Host,
        (6, b'a') => Known::Accept,
        (6, b'o') => Known::Origin,
        (10, b'u') => Known::UserAgent,
        (12, b'c') => Known::ContentType,
        (13, b'a') => Known::Authorization,
        (14, b'c') => Known::ContentLength,
        (15, b'a') => Known::AcceptEncoding,
        (9, b'x') => Known::XApiKey,
        (17, b'a') => Known::AnthropicVersion,
        (14, b'a') => Known::AnthropicBeta,
        (10, b'c') => Known::Connection,
        (11, b't') => Known::Traceparent,
        (11, b'o') => Known::OpenAiBeta,
        (21, b'x') => Known::Failover,
        // `x-switchyard-timeout` and `x-switchyard-session`, told apart after the prefix.
        (20, b'x') if name[13] | 0x20 == b't' => Known::Timeout,
        (20, b'x') => Known::Session,
        _ => return None,
    };
    same_token(name, known.name().as_str().as_bytes()).then_some(known)
}

/// Whether the token `name` is `lower` (lowercase letters, digits and `-`) in any case.
///
/// A token's byte is one of `lower`'s or its uppercase letter when it is so with 0x20 set: no
/// other token byte is (`-` and the digits less 0x20 are control characters). Compared eight
/// bytes at a time (four for a name shorter than eight), the last word overlapping the one
/// before it (`eq_ignore_ascii_case` takes ~15 instructions a byte).
fn same_token(name: &[u8], lower: &[u8]) -> bool {
    const CASE: u64 = u64::from_le_bytes([0x20; 8]);
    let n = name.len();
    if n != lower.len() {
        return false;
    }
    if n < 8 {
        if n < 4 {
            return name.eq_ignore_ascii_case(lower);
        }
        let word =
            |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let differ = |at| (word(name, at) | CASE as u32) ^ word(lower, at);
        return differ(0) | differ(n - 4) == 0;
    }
    let word = |b: &[u8], at: usize| {
        let mut w = [0; 8];
        w.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let differ = |at| (word(name, at) | CASE) ^ word(lower, at);
    let mut at = 0;
    let mut any = 0;
    while at + 8 < n {
        any |= differ(at);
        at += 8;
    }
    any | differ(n - 8) == 0
}

/// The client API's endpoints, parsed once: a request for one of them clones a `Uri` (its
/// bytes static) instead of checking each byte of its target (~250 instructions).
static KNOWN: std::sync::LazyLock<[Uri; 3]> = std::sync::LazyLock::new(|| {
    ["/v1/chat/completions", "/v1/messages", "/v1/responses"].map(Uri::from_static)
});

/// The target and fields of the head in `bytes` as `http` has them (sharing `bytes`, no
/// copy), if it takes them. A `POST` to the client API is given only the fields it reads
/// ([`headers::READ`]); any other request, all of them.
pub(super) fn uri_and_fields(
    fields: &mut Vec<Field>,
    head: &Head,
    bytes: &Bytes,
) -> Option<(Uri, HeaderMap)> {
    let target = &bytes[head.target.0..head.target.1];
    let (uri, api) = match KNOWN.iter().find(|known| known.path().as_bytes() == target) {
        Some(known) => (known.clone(), true),
        None => {
            let uri = Uri::from_maybe_shared(bytes.slice(head.target.0..head.target.1)).ok()?;
            let api = ClientApi::of(uri.path()).is_some();
            (uri, api)
        }
    };
    let only_read = api && head.method == Method::POST;
    let mut headers = HeaderMap::with_capacity(if only_read { 0 } else { fields.len() });
    for field in fields.drain(..) {
        let name = match field.known {
            Some(known) if !only_read || known.read_by_client_api() => known.name().clone(),
            Some(_) => continue,
            None if only_read => continue,
            None => HeaderName::from_bytes(&bytes[field.name.0..field.name.1]).ok()?,
        };
        let value = bytes.slice(field.value.0..field.value.1);
        headers.append(name, HeaderValue::from_maybe_shared(value).ok()?);
    }
    Some((uri, headers))
}

/// Fuzzing (`fuzz/fuzz_targets/h1_request.rs`): any bytes as what a client sends first. A
/// head served here reads as httparse reads it (method, target less a fragment, each field's
/// name and values in order, those the client API reads for a request to it) and as `http`
/// takes it, every shorter prefix of it is partial, and a body over `max_body` is never
/// served here.
#[cfg(fuzzing)]
pub fn fuzz_request(data: &[u8]) {
    const MAX_BODY: usize = 1000;
    let mut fields = Vec::new();
    let head = match parse(data, &mut fields, MAX_BODY) {
        Parse::Head(head) => head,
        Parse::Partial | Parse::Hyper => return,
    };
    assert!(head.body <= MAX_BODY);
    for cut in [0, 1, head.len / 2, head.len - 1] {
        let short = parse(&data[..cut], &mut Vec::new(), MAX_BODY);
        assert!(
            matches!(short, Parse::Partial),
            "{cut} of {}: {short:?}",
            head.len
        );
    }
    let mut slots = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut req = httparse::Request::new(&mut slots);
    assert_eq!(
        req.parse(data).ok(),
        Some(httparse::Status::Complete(head.len))
    );
    assert_eq!(req.method, Some(head.method.as_str()));
    let bytes = Bytes::copy_from_slice(&data[..head.len]);
    let Some((uri, map)) = uri_and_fields(&mut fields, &head, &bytes) else {
        return; // hyper's to refuse
    };
    // `http` drops a fragment, as it does under hyper.
    let target = req.path.map(|p| p.split('#').next().unwrap_or(p));
    assert_eq!(uri.path_and_query().map(|p| p.as_str()), target);
    // A `POST` to the client API gets the fields it reads, any other request all of them.
    let only_read = head.method == Method::POST && ClientApi::of(uri.path()).is_some();
    // A `HeaderMap` keeps the order of each name's values, not of the names.
    let mut theirs: Vec<(String, &[u8])> = req
        .headers
        .iter()
        .map(|f| (f.name.to_ascii_lowercase(), f.value))
        .filter(|(name, _)| !only_read || headers::READ.iter().any(|r| r.as_str() == name))
        .collect();
    let mut ours: Vec<(String, &[u8])> = map
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes()))
        .collect();
    theirs.sort_by(|a, b| a.0.cmp(&b.0));
    ours.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(ours, theirs);
}

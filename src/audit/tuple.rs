//! A record on its way to the store, in its stored form: the tuple of PostgreSQL's binary
//! `COPY` format (a 16-bit field count, then each field as a 32-bit length, -1 for NULL, and
//! its bytes; big-endian), appended to a buffer by the thread that made the record. A batch of
//! them is, with a header and a trailer, the whole body of PostgreSQL's `COPY`; SQLite reads the
//! fields back ([`Tuples`]) to bind them.
//!
//! Encoding on the request's own thread, into a buffer that thread keeps, is what lets the
//! audit log cost the request path so little: no allocation or channel message per record, and
//! nothing but whole buffers crosses to the writer.

use super::redact::Redactor;
use super::{AuditAttempt, AuditError, AuditRecord};

/// Fields per tuple: the columns of `schema::COLUMNS`, in order.
pub(crate) const FIELDS: usize = 22;

/// A field's stored type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Text,
    Int8,
    Int4,
    Float8,
    Bool,
}

/// The type of each of `schema::COLUMNS`.
pub(crate) const KINDS: [Kind; FIELDS] = [
    Kind::Text,   // request_id
    Kind::Int8,   // time_ms
    Kind::Text,   // client_key_id
    Kind::Text,   // route
    Kind::Bool,   // stream
    Kind::Int4,   // status
    Kind::Text,   // target
    Kind::Float8, // latency_ms
    Kind::Float8, // ttft_ms
    Kind::Int8,   // tokens_in
    Kind::Int8,   // tokens_out
    Kind::Int4,   // turns_dropped
    Kind::Bool,   // hedged
    Kind::Text,   // error
    Kind::Int4,   // attempts
    Kind::Text,   // path
    Kind::Text,   // request_body
    Kind::Text,   // response_body
    Kind::Text,   // session
    Kind::Text,   // trace_id
    Kind::Int8,   // cache_read_tokens
    Kind::Int8,   // cache_write_tokens
];

/// What precedes the tuples in a binary `COPY`: the signature, no flags, no header extension.
pub(crate) const COPY_HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";
/// What follows them: a field count of -1.
pub(crate) const COPY_TRAILER: &[u8] = &[0xff, 0xff];

/// Append `r` to `out` as one tuple; error text and bodies have `redactor`'s secrets masked.
pub(crate) fn encode(r: &AuditRecord, redactor: &Redactor, out: &mut Vec<u8>) {
    out.extend_from_slice(&(FIELDS as i16).to_be_bytes());
    text(out, &r.request_id);
    int8(out, r.time_ms);
    opt_text(out, r.client_key_id.as_deref());
    text(out, &r.route);
    bool_(out, r.stream);
    int4(out, i32::from(r.status));
    opt_text(out, r.target.as_deref());
    float8(out, r.latency_ms);
    match r.ttft_ms {
        Some(v) => float8(out, v),
        None => null(out),
    }
    for n in [r.tokens_in, r.tokens_out] {
        opt_count(out, n);
    }
    int4(out, i32::try_from(r.turns_dropped).unwrap_or(i32::MAX));
    bool_(out, r.hedged);
    redacted(out, r.error.as_deref(), redactor);
    int4(out, i32::try_from(r.path.len()).unwrap_or(i32::MAX));
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    path_json(out, &r.path);
    patch_len(out, at);
    redacted(out, r.request_body.as_deref(), redactor);
    redacted(out, r.response_body.as_deref(), redactor);
    opt_text(out, r.session.as_deref());
    opt_text(out, r.trace_id.as_deref());
    opt_count(out, r.cache_read_tokens);
    opt_count(out, r.cache_write_tokens);
}

/// A token count (past `i64::MAX`, which no answer reaches, it saturates).
fn opt_count(out: &mut Vec<u8>, n: Option<u64>) {
    match n {
        Some(n) => int8(out, i64::try_from(n).unwrap_or(i64::MAX)),
        None => null(out),
    }
}

/// The path as JSON, as serde would write it but with times to the microsecond. Written by
/// hand: through serde_json it cost about as much as the rest of the record together (its
/// float formatting above all). JSON escapes NUL, so nothing needs cleaning for PostgreSQL.
fn path_json(out: &mut Vec<u8>, path: &[AuditAttempt]) {
    out.push(b'[');
    for (i, a) in path.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"target\":");
        json_str(out, &a.target);
        out.extend_from_slice(b",\"start_ms\":");
        json_ms(out, a.start_ms);
        out.extend_from_slice(b",\"duration_ms\":");
        json_ms(out, a.duration_ms);
        out.extend_from_slice(b",\"outcome\":");
        json_str(out, &a.outcome);
        out.extend_from_slice(b",\"status\":");
        match a.status {
            Some(s) => decimal(out, u64::from(s)),
            None => out.extend_from_slice(b"null"),
        }
        if let Some(n) = a.carried_chars {
            out.extend_from_slice(b",\"carried_chars\":");
            decimal(out, n);
        }
        if let Some(p) = &a.picked {
            out.extend_from_slice(b",\"picked\":");
            json_str(out, p);
        }
        out.push(b'}');
    }
    out.push(b']');
}

/// A JSON string.
fn json_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut from = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => &[],
            _ => continue,
        };
        out.extend_from_slice(&bytes[from..i]);
        if escape.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xf)]);
        } else {
            out.extend_from_slice(escape);
        }
        from = i + 1;
    }
    out.extend_from_slice(&bytes[from..]);
    out.push(b'"');
}

/// Milliseconds with three decimals (to the microsecond); `null` if not a finite number.
fn json_ms(out: &mut Vec<u8>, ms: f64) {
    if !ms.is_finite() {
        out.extend_from_slice(b"null");
        return;
    }
    if ms < 0.0 {
        out.push(b'-');
    }
    // Saturates far beyond any duration a request has.
    let us = (ms.abs() * 1000.0).round() as u64;
    decimal(out, us / 1000);
    let frac = us % 1000;
    out.extend_from_slice(&[
        b'.',
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

fn decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

fn null(out: &mut Vec<u8>) {
    out.extend_from_slice(&(-1i32).to_be_bytes());
}

fn int8(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&8i32.to_be_bytes());
    out.extend_from_slice(&v.to_be_bytes());
}

fn int4(out: &mut Vec<u8>, v: i32) {
    out.extend_from_slice(&4i32.to_be_bytes());
    out.extend_from_slice(&v.to_be_bytes());
}

fn float8(out: &mut Vec<u8>, v: f64) {
    out.extend_from_slice(&8i32.to_be_bytes());
    out.extend_from_slice(&v.to_bits().to_be_bytes());
}

fn bool_(out: &mut Vec<u8>, v: bool) {
    out.extend_from_slice(&1i32.to_be_bytes());
    out.push(u8::from(v));
}

/// Text, with any NUL (which PostgreSQL's text cannot hold) replaced by U+FFFD.
fn text(out: &mut Vec<u8>, s: &str) {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    let bytes = s.as_bytes();
    // `contains` is a memchr: the common case costs a scan and one copy.
    if bytes.contains(&0) {
        for (i, piece) in bytes.split(|&b| b == 0).enumerate() {
            if i > 0 {
                out.extend_from_slice("\u{FFFD}".as_bytes());
            }
            out.extend_from_slice(piece);
        }
    } else {
        out.extend_from_slice(bytes);
    }
    patch_len(out, at);
}

fn opt_text(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => text(out, s),
        None => null(out),
    }
}

fn redacted(out: &mut Vec<u8>, s: Option<&str>, redactor: &Redactor) {
    match s {
        Some(s) => text(out, &redactor.redact(s)),
        None => null(out),
    }
}

/// Write the length of what follows the 4 bytes at `at` into them.
fn patch_len(out: &mut [u8], at: usize) {
    let len = i32::try_from(out.len() - at - 4).unwrap_or(i32::MAX);
    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

/// One field read back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Field<'a> {
    Null,
    Text(&'a str),
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// The tuples in a buffer [`encode`] filled, read in order.
pub(crate) struct Tuples<'a> {
    buf: &'a [u8],
}

impl<'a> Tuples<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Tuples { buf }
    }

    /// The next tuple's fields, `None` at the end.
    pub(super) fn next_tuple(&mut self) -> Result<Option<[Field<'a>; FIELDS]>, AuditError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        if take(&mut self.buf, 2)? != (FIELDS as i16).to_be_bytes() {
            return Err(corrupt());
        }
        let mut fields = [Field::Null; FIELDS];
        for (field, kind) in fields.iter_mut().zip(KINDS) {
            let len = i32::from_be_bytes(array(take(&mut self.buf, 4)?)?);
            if len < 0 {
                continue;
            }
            let bytes = take(&mut self.buf, len as usize)?;
            *field = match kind {
                Kind::Text => Field::Text(std::str::from_utf8(bytes).map_err(|_| corrupt())?),
                Kind::Int8 => Field::Int(i64::from_be_bytes(array(bytes)?)),
                Kind::Int4 => Field::Int(i64::from(i32::from_be_bytes(array(bytes)?))),
                Kind::Float8 => Field::Float(f64::from_bits(u64::from_be_bytes(array(bytes)?))),
                Kind::Bool => Field::Bool(bytes.first().is_some_and(|&b| b != 0)),
            };
        }
        Ok(Some(fields))
    }
}

/// Where the tuple after the first `n` of `buf` starts (`buf.len()` if it holds no more).
pub(crate) fn skip(buf: &[u8], n: usize) -> usize {
    let mut at = 0;
    for _ in 0..n {
        at += 2;
        for _ in 0..FIELDS {
            let Some(len) = buf.get(at..at + 4) else {
                return buf.len();
            };
            let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
            at += 4 + usize::try_from(len).unwrap_or(0);
        }
    }
    at.min(buf.len())
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> Result<&'a [u8], AuditError> {
    if buf.len() < n {
        return Err(corrupt());
    }
    let (head, rest) = buf.split_at(n);
    *buf = rest;
    Ok(head)
}

/// A field's bytes as a fixed-size value's.
fn array<const N: usize>(bytes: &[u8]) -> Result<[u8; N], AuditError> {
    bytes.try_into().map_err(|_| corrupt())
}

fn corrupt() -> AuditError {
    AuditError::Invalid("audit buffer is corrupt (a bug: please report it)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> AuditRecord {
        AuditRecord {
            request_id: "req-1".into(),
            time_ms: 1_700_000_000_123,
            client_key_id: Some("team-a".into()),
            route: "chat\0x".into(),
            stream: true,
            status: 200,
            target: None,
            latency_ms: 12.5,
            ttft_ms: Some(3.25),
            tokens_in: Some(10),
            tokens_out: None,
            turns_dropped: 2,
            hedged: false,
            error: Some("bad key sk-live-abcdefghijklmnop".into()),
            path: vec![AuditAttempt {
                target: "a/m".into(),
                start_ms: 0.0,
                duration_ms: 1.5,
                outcome: "ok".into(),
                status: Some(200),
                carried_chars: None,
                picked: None,
            }],
            request_body: None,
            response_body: Some("{}".into()),
            session: Some("prompt:00ff".into()),
            trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
            cache_read_tokens: Some(7),
            cache_write_tokens: None,
        }
    }

    #[test]
    fn fields_read_back_as_written_with_nul_replaced_and_secrets_masked() {
        let mut buf = Vec::new();
        let redactor = Redactor::new(["sk-live-abcdefghijklmnop".to_owned()]);
        encode(&record(), &redactor, &mut buf);
        encode(&record(), &redactor, &mut buf);
        let mut tuples = Tuples::new(&buf);
        let f = tuples.next_tuple().unwrap().unwrap();
        assert_eq!(f[0], Field::Text("req-1"));
        assert_eq!(f[1], Field::Int(1_700_000_000_123));
        assert_eq!(f[2], Field::Text("team-a"));
        assert_eq!(f[3], Field::Text("chat\u{FFFD}x"));
        assert_eq!(f[4], Field::Bool(true));
        assert_eq!(f[5], Field::Int(200));
        assert_eq!(f[6], Field::Null);
        assert_eq!(f[7], Field::Float(12.5));
        assert_eq!(f[8], Field::Float(3.25));
        assert_eq!(
            (f[9], f[10], f[11], f[12]),
            (
                Field::Int(10),
                Field::Null,
                Field::Int(2),
                Field::Bool(false)
            )
        );
        let Field::Text(error) = f[13] else {
            panic!("{:?}", f[13])
        };
        assert!(!error.contains("abcdefghijklmnop"), "{error}");
        assert_eq!(f[14], Field::Int(1));
        let Field::Text(path) = f[15] else {
            panic!("{:?}", f[15])
        };
        let path: Vec<AuditAttempt> = serde_json::from_str(path).unwrap();
        assert_eq!(path, record().path);
        assert_eq!((f[16], f[17]), (Field::Null, Field::Text("{}")));
        assert_eq!(
            (f[18], f[19]),
            (
                Field::Text("prompt:00ff"),
                Field::Text("4bf92f3577b34da6a3ce929d0e0e4736")
            )
        );
        assert_eq!((f[20], f[21]), (Field::Int(7), Field::Null));
        assert!(tuples.next_tuple().unwrap().is_some());
        assert!(tuples.next_tuple().unwrap().is_none());
    }

    #[test]
    fn the_path_is_json_that_reads_back_with_times_to_the_microsecond() {
        let attempt = |target: &str, start_ms: f64, status, carried_chars| AuditAttempt {
            target: target.into(),
            start_ms,
            duration_ms: 1234.5678,
            outcome: "status".into(),
            status,
            carried_chars,
            picked: None,
        };
        let path = vec![
            attempt(
                "p/\"quoted\" \\ \u{1}\n\t\r é 模型 \u{7f}",
                0.0,
                Some(503),
                None,
            ),
            attempt("p/m", 0.0004, None, Some(12)),
            attempt("p/m", -2.5, None, None),
            attempt("p/m", f64::NAN, None, None),
            attempt("p/m", 1e30, None, None),
        ];
        let mut out = Vec::new();
        path_json(&mut out, &path);
        let text = std::str::from_utf8(&out).unwrap();
        let got: Vec<serde_json::Value> =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(got[0]["target"], path[0].target.as_str());
        assert_eq!(got[0]["duration_ms"], 1234.568);
        assert_eq!(got[0]["start_ms"], 0.0);
        assert_eq!(got[0]["status"], 503);
        assert!(got[0].get("carried_chars").is_none());
        assert_eq!(got[1]["start_ms"], 0.0);
        assert_eq!(got[1]["status"], serde_json::Value::Null);
        assert_eq!(got[1]["carried_chars"], 12);
        assert_eq!(got[2]["start_ms"], -2.5);
        assert_eq!(got[3]["start_ms"], serde_json::Value::Null);
        assert!(got[4]["start_ms"].as_f64().unwrap() > 1e15);
        // The records' own type reads it back (up to the NaN, which serde writes as null too
        // and cannot read as a number).
        let back: Vec<AuditAttempt> = serde_json::from_str(&{
            let mut out = Vec::new();
            path_json(&mut out, &path[..3]);
            String::from_utf8(out).unwrap()
        })
        .unwrap();
        assert_eq!(back[0].target, path[0].target);
        assert_eq!(back[1].carried_chars, Some(12));
        let mut empty = Vec::new();
        path_json(&mut empty, &[]);
        assert_eq!(empty, b"[]");
    }

    #[test]
    fn skip_finds_each_tuple_start_and_a_cut_buffer_reads_as_corrupt() {
        let mut buf = Vec::new();
        let redactor = Redactor::new([]);
        encode(&record(), &redactor, &mut buf);
        let one = buf.len();
        encode(&record(), &redactor, &mut buf);
        assert_eq!(skip(&buf, 0), 0);
        assert_eq!(skip(&buf, 1), one);
        assert_eq!(skip(&buf, 2), buf.len());
        assert_eq!(skip(&buf, 5), buf.len());
        let mut cut = Tuples::new(&buf[..one - 3]);
        assert!(matches!(cut.next_tuple(), Err(AuditError::Invalid(_))));
    }
}

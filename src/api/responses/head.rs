//! What the gateway reads of a Responses request before routing it.

use std::borrow::Cow;

use serde::Deserialize;

/// What the gateway reads of a request before routing it.
#[derive(Deserialize)]
pub(super) struct Head<'a> {
    #[serde(borrow)]
    pub(super) model: Option<&'a serde_json::value::RawValue>,
    pub(super) stream: Option<bool>,
    #[serde(default)]
    pub(super) store: Option<bool>,
    #[serde(default, borrow)]
    pub(super) previous_response_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(super) include: Vec<Cow<'a, str>>,
}

impl<'a> Head<'a> {
    /// The head of `body`, from the spans of [`crate::canonical::responses::HEAD_FIELDS`]
    /// the scanner found in its pass over it (`plain`), when they read as serde_json reads
    /// them; else by serde_json (which says why it refuses a body). An agent's turn carries its
    /// whole history and tools, which serde_json read at ~5 instructions a byte.
    pub(super) fn read(
        body: &'a [u8],
        plain: Option<&crate::wire::scan::Spans<5>>,
    ) -> Result<Head<'a>, serde_json::Error> {
        match plain.and_then(|spans| Head::of_spans(body, spans)) {
            Some(head) => Ok(head),
            None => serde_json::from_slice(body),
        }
    }

    /// [`Head::read`] from the scanner's spans (`None` when a value does not read as
    /// serde_json reads it).
    fn of_spans(body: &'a [u8], spans: &crate::wire::scan::Spans<5>) -> Option<Head<'a>> {
        use crate::wire::scan;
        let [model, stream, store, previous, include] = spans.clone();
        // Short values, read by serde_json from their own bytes.
        let model = match scan::not_null(body, model) {
            Some(r) => Some(serde_json::from_slice(&body[r]).ok()?),
            None => None,
        };
        let previous_response_id = match scan::not_null(body, previous) {
            Some(r) => Some(scan::text(body, r)?),
            None => None,
        };
        let include = match include {
            Some(r) => serde_json::from_slice(&body[r]).ok()?,
            None => Vec::new(),
        };
        Some(Head {
            model,
            stream: scan::flag(body, stream)?,
            store: scan::flag(body, store)?,
            previous_response_id,
            include,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical;

    /// The scanner reads a request's head as serde_json does, or leaves the body to it.
    #[test]
    fn a_head_reads_alike_by_the_scanner_and_by_serde_json() {
        /// A head's fields, owned, as text.
        fn show(h: &Head<'_>) -> String {
            format!(
                "{:?} {:?} {:?} {:?} {:?}",
                h.model.map(|m| m.get()),
                h.stream,
                h.store,
                h.previous_response_id,
                h.include
            )
        }
        let input = r#""input":[{"type":"message","role":"user","content":"a \"b\" \u00e9"}]"#;
        let mut taken = 0;
        for body in [
            format!(r#"{{"model":"m",{input}}}"#),
            format!(r#"{{{input},"model":"m","stream":true,"store":false}}"#),
            format!(r#"{{"model":"a\u0062","stream":null,"store":null,{input}}}"#),
            format!(r#"{{"model":"m","previous_response_id":"resp_\u0031",{input}}}"#),
            r#"{"model":"m","previous_response_id":null,"include":["reasoning.encrypted_content"]}"#
                .to_owned(),
            format!(r#"{{"model":7,{input}}}"#),
            format!(r#"{{"model":null,{input}}}"#),
            format!(r#"{{{input}}}"#),
            format!(r#"{{"model":"m","stream":"yes",{input}}}"#),
            format!(r#"{{"model":"m","store":1,{input}}}"#),
            format!(r#"{{"model":"m","previous_response_id":7,{input}}}"#),
            format!(r#"{{"model":"m","include":null,{input}}}"#),
            format!(r#"{{"model":"m","include":[1],{input}}}"#),
            format!(r#"{{"model":"m","model":"n",{input}}}"#),
            format!(r#"{{"model":"m",{input},}}"#),
        ] {
            let by_serde = serde_json::from_str::<Head<'_>>(&body).map(|h| show(&h));
            let plain = canonical::responses::read_plain(body.as_bytes());
            let spans = plain.as_ref().map(|(_, spans)| spans);
            if let Some(head) = spans.and_then(|s| Head::of_spans(body.as_bytes(), s)) {
                taken += 1;
                assert_eq!(Some(show(&head)), by_serde.as_ref().ok().cloned(), "{body}");
            }
            let either = Head::read(body.as_bytes(), spans).map(|h| show(&h));
            assert_eq!(either.ok(), by_serde.ok(), "{body}");
        }
        assert_eq!(taken, 8, "the plain bodies are the scanner's");
    }
}

//! The mock's own check of AWS Signature Version 4, written from the published algorithm
//! apart from the gateway's signer (the `aws-sigv4` crate), so a test that passes through both
//! shows the gateway signs what AWS would verify. Known answers: AWS's test suite (below).

use ring::{digest, hmac};

/// The access key id the mock's Bedrock accepts, and its secret.
pub const ACCESS_KEY_ID: &str = "AKIDSWITCHYARDMOCK";
pub const SECRET_ACCESS_KEY: &str = "mock/secret/K7MDENG+bPxRfiCYEXAMPLEKEY";

/// What a signed request says of itself.
pub(super) struct Request<'a> {
    pub method: &'a str,
    /// The path as it came on the wire (percent-encoded once).
    pub path: &'a str,
    pub query: &'a str,
    /// Every header, names lowercase.
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
}

/// Check the request's `authorization` against `secret_of(access key id)`; the reason when it
/// does not hold.
pub(super) fn verify(
    req: &Request<'_>,
    secret_of: impl Fn(&str) -> Option<String>,
) -> Result<(), String> {
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let auth = header("authorization").ok_or("no authorization header")?;
    let rest = auth
        .strip_prefix("AWS4-HMAC-SHA256 ")
        .ok_or("not an AWS4-HMAC-SHA256 signature")?;
    let mut credential = None;
    let mut signed_headers = None;
    let mut signature = None;
    for part in rest.split(',') {
        let part = part.trim();
        if let Some(v) = part.strip_prefix("Credential=") {
            credential = Some(v);
        } else if let Some(v) = part.strip_prefix("SignedHeaders=") {
            signed_headers = Some(v);
        } else if let Some(v) = part.strip_prefix("Signature=") {
            signature = Some(v);
        }
    }
    let (credential, signed_headers, signature) = (
        credential.ok_or("no Credential")?,
        signed_headers.ok_or("no SignedHeaders")?,
        signature.ok_or("no Signature")?,
    );
    let mut scope = credential.splitn(5, '/');
    let (key_id, date, region, service) = (
        scope.next().unwrap_or(""),
        scope.next().unwrap_or(""),
        scope.next().unwrap_or(""),
        scope.next().unwrap_or(""),
    );
    if scope.next() != Some("aws4_request") {
        return Err("a malformed credential scope".into());
    }
    let secret = secret_of(key_id).ok_or_else(|| format!("unknown access key id {key_id}"))?;
    let amz_date = header("x-amz-date").ok_or("no x-amz-date")?;
    if !amz_date.starts_with(date) {
        return Err("x-amz-date is not the credential's date".into());
    }
    let names: Vec<&str> = signed_headers.split(';').collect();
    for required in ["host", "x-amz-date"] {
        if !names.contains(&required) {
            return Err(format!("{required} is not signed"));
        }
    }
    if header("x-amz-security-token").is_some() && !names.contains(&"x-amz-security-token") {
        return Err("the session token is not signed".into());
    }
    let mut values = Vec::with_capacity(names.len());
    for name in &names {
        let value = header(name).ok_or_else(|| format!("signed header {name} is missing"))?;
        values.push((*name, value));
    }
    let want = sign(
        secret.as_str(),
        &Signed {
            method: req.method,
            path: req.path,
            query: req.query,
            headers: &values,
            payload_hash: &hex(digest::digest(&digest::SHA256, req.body).as_ref()),
            amz_date,
            region,
            service,
        },
    );
    if want == signature {
        Ok(())
    } else {
        Err("The request signature we calculated does not match the signature you provided.".into())
    }
}

/// The parts of a request that its signature covers.
pub(super) struct Signed<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a str,
    /// The signed headers, names lowercase, in any order.
    pub headers: &'a [(&'a str, &'a str)],
    pub payload_hash: &'a str,
    /// `YYYYMMDDTHHMMSSZ`.
    pub amz_date: &'a str,
    pub region: &'a str,
    pub service: &'a str,
}

/// The signature (hex) of `s` with `secret`.
pub(super) fn sign(secret: &str, s: &Signed<'_>) -> String {
    let date = s.amz_date.get(..8).unwrap_or("");
    let scope = format!("{date}/{}/{}/aws4_request", s.region, s.service);
    let request = canonical_request(s);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{}\n{scope}\n{}",
        s.amz_date,
        hex(digest::digest(&digest::SHA256, request.as_bytes()).as_ref())
    );
    let mut key = format!("AWS4{secret}").into_bytes();
    for part in [date, s.region, s.service, "aws4_request"] {
        key = mac(&key, part.as_bytes());
    }
    hex(&mac(&key, to_sign.as_bytes()))
}

fn canonical_request(s: &Signed<'_>) -> String {
    let mut headers: Vec<(String, String)> = s
        .headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), collapse(v)))
        .collect();
    headers.sort();
    let names: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
    let mut out = format!(
        "{}\n{}\n{}\n",
        s.method,
        canonical_path(s.path),
        canonical_query(s.query)
    );
    for (k, v) in &headers {
        out.push_str(&format!("{k}:{v}\n"));
    }
    out.push_str(&format!("\n{}\n{}", names.join(";"), s.payload_hash));
    out
}

/// The path as sent, encoded once more (every service but S3 signs it so): each byte but the
/// unreserved ones and `/` as `%XX`, so `%3A` becomes `%253A`.
fn canonical_path(path: &str) -> String {
    if path.is_empty() {
        return "/".into();
    }
    encode(path, true)
}

fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (encode(&decode(k), false), encode(&decode(v), false))
        })
        .collect();
    pairs.sort();
    let pairs: Vec<String> = pairs.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.join("&")
}

fn encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'.' | b'_' | b'~')
            || (keep_slash && b == b'/')
        {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex_at = |j: usize| {
            bytes
                .get(j..j + 2)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        };
        match (bytes[i], hex_at(i + 1)) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A header value with its runs of spaces collapsed and its ends trimmed.
fn collapse(v: &str) -> String {
    v.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn mac(key: &[u8], data: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data)
        .as_ref()
        .to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    const EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn suite(method: &str, query: &str, headers: &[(&str, &str)]) -> String {
        sign(
            SECRET,
            &Signed {
                method,
                path: "/",
                query,
                headers,
                payload_hash: EMPTY,
                amz_date: "20150830T123600Z",
                region: "us-east-1",
                service: "service",
            },
        )
    }

    const VANILLA: &[(&str, &str)] = &[
        ("host", "example.amazonaws.com"),
        ("x-amz-date", "20150830T123600Z"),
    ];

    /// AWS's SigV4 test suite (aws-c-auth `aws-signing-test-suite`, v4).
    #[test]
    fn the_aws_test_suite_vectors() {
        assert_eq!(
            suite("GET", "", VANILLA),
            "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
            "get-vanilla"
        );
        assert_eq!(
            suite("POST", "", VANILLA),
            "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b",
            "post-vanilla"
        );
        assert_eq!(
            suite("GET", "Param2=value2&Param1=value1", VANILLA),
            "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
            "get-vanilla-query-order-key-case"
        );
        let token = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267";
        let with_token = [VANILLA[0], VANILLA[1], ("x-amz-security-token", token)];
        assert_eq!(
            suite("GET", "", &with_token),
            "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8",
            "get-vanilla-with-session-token"
        );
    }

    #[test]
    fn the_path_is_encoded_again() {
        assert_eq!(
            canonical_path("/model/a.b-v1%3A0/invoke"),
            "/model/a.b-v1%253A0/invoke"
        );
        assert_eq!(canonical_path(""), "/");
    }
}

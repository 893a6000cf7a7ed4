use super::*;

fn at<'a>(body: &'a str, span: &Option<Range<usize>>) -> Option<&'a str> {
    span.clone().map(|r| &body[r])
}

#[test]
fn finds_the_values_of_top_level_keys_only() {
    let body = r#" { "a" : [1, {"b": 2}] ,"b":"x\"y\u00e9","n":-0.5e+3,"c":{"a":null} } "#;
    let found = fields(body.as_bytes(), ["a", "b", "c", "z"]).unwrap();
    assert_eq!(at(body, &found[0]), Some(r#"[1, {"b": 2}]"#));
    assert_eq!(at(body, &found[1]), Some(r#""x\"y\u00e9""#));
    assert_eq!(at(body, &found[2]), Some(r#"{"a":null}"#));
    assert_eq!(at(body, &found[3]), None);
    let [inner] = fields_in(body.as_bytes(), found[2].clone().unwrap(), ["a"]).unwrap();
    assert_eq!(at(body, &inner), Some("null"));
    assert!(fields_in(body.as_bytes(), found[0].clone().unwrap(), ["a"]).is_none());
    assert_eq!(items_of(r#"{"a":[]}"#), Some(vec![]));
    assert_eq!(items_of(r#"{"a":{}}"#), None);
    assert_eq!(items_of(r#"{"a":[{}, 1]}"#), None);
    assert_eq!(
        items_of(r#"{"a":[{"b":1,"c":{"b":2}}, {"c":[]} ]}"#),
        Some(vec![Some("1".into()), None])
    );
    assert_eq!(
        items_of(r#"{"a":[{"b":1},{"b":"x","b":"y"}]}"#),
        None,
        "a key asked for, twice"
    );
}

/// A nested object's fields are found in the outer pass as `fields_in` finds them after
/// it; one that is not a plain object is read as any other value, and the body with it.
#[test]
fn finds_the_fields_of_a_nested_object_in_the_same_pass() {
    let nested_of = |body: &str| {
        let b = body.as_bytes();
        let (found, nested) = fields_and_nested(b, ["a", "b", "c"], &[0, 2], ["x", "y"])?;
        assert_eq!(Some(found.clone()), fields(b, ["a", "b", "c"]), "{body}");
        if let Some((k, spans)) = &nested {
            let span = found[*k].clone().unwrap();
            assert_eq!(
                Some(spans.clone()),
                fields_in(b, span, ["x", "y"]),
                "{body}"
            );
        }
        Some(nested.map(|(k, spans)| (k, spans.map(|s| at(body, &s).map(str::to_owned)))))
    };
    let some = |s: &str| Some(s.to_owned());
    assert_eq!(
        nested_of(r#"{"b":{"x":1},"a":{"y":[2],"z":{"x":3},"x":"é"}}"#),
        Some(Some((0, [some(r#""é""#), some("[2]")])))
    );
    assert_eq!(
        nested_of(r#"{"c":{"x":1},"a":{"x":2}}"#),
        Some(Some((2, [some("1"), None]))),
        "the first one"
    );
    assert_eq!(nested_of(r#"{"a":[1],"b":2}"#), Some(None), "not an object");
    assert_eq!(
        nested_of(r#"{"a":{"\u0078":1}}"#),
        Some(None),
        "a key with escapes"
    );
    assert_eq!(
        nested_of(r#"{"a":{"x":1,"x":2}}"#),
        Some(None),
        "a key twice"
    );
    assert_eq!(
        nested_of(r#"{"a":{"\u0078":1},"c":{"y":2}}"#),
        Some(Some((2, [None, some("2")]))),
        "the first plain one"
    );
    assert_eq!(nested_of(r#"{"a":{"x":1,}}"#), None, "not JSON");
    assert_eq!(nested_of(r#"{"a":{"x":1}} x"#), None, "not JSON after it");
    let not_utf8 = fields_and_nested(b"{\"a\":{\"x\":\"\xff\"}}", ["a"], &[0], ["x"]);
    assert_eq!(not_utf8, None, "not UTF-8");
}

/// The `b` of each item of the array `a` of `body`.
fn items_of(body: &str) -> Option<Vec<Option<String>>> {
    let mut found = Vec::new();
    let ([a], count) = fields_and_items(body.as_bytes(), ["a"], 0, ["b"], |[b]| {
        found.push(at(body, &b).map(str::to_owned));
        true
    })?;
    assert_eq!(count, found.len());
    assert_eq!(a, fields(body.as_bytes(), ["a"])?[0]);
    Some(found)
}

#[test]
fn finds_items_and_a_nested_object_in_the_same_pass() {
    let read = |body: &str| {
        let b = body.as_bytes();
        let mut items = Vec::new();
        let (found, count, nested) = fields_items_and_nested(
            b,
            ["a", "u"],
            (0, ["b"]),
            |[item]| {
                items.push(at(body, &item).map(str::to_owned));
                true
            },
            (1, ["x", "y"]),
        )?;
        assert_eq!(Some(found.clone()), fields(b, ["a", "u"]), "{body}");
        assert_eq!(count, items.len());
        let after = found[1]
            .clone()
            .and_then(|span| fields_in(b, span, ["x", "y"]));
        assert_eq!(nested, after, "{body}");
        let nested = nested.map(|spans| spans.map(|s| at(body, &s).map(str::to_owned)));
        Some((items, nested))
    };
    let some = |s: &str| Some(s.to_owned());
    assert_eq!(
        read(r#"{"u":{"y":2,"z":{"x":0},"x":1},"a":[{"b":3},{"c":4}]}"#),
        Some((vec![some("3"), None], Some([some("1"), some("2")])))
    );
    assert_eq!(
        read(r#"{"a":[],"u":[{"x":1}]}"#),
        Some((vec![], None)),
        "not an object"
    );
    assert_eq!(
        read(r#"{"a":[{"b":1}],"u":{"\u0078":1}}"#),
        Some((vec![some("1")], None)),
        "a key with escapes"
    );
    assert_eq!(
        read(r#"{"u":{"x":1,"x":2}}"#),
        Some((vec![], None)),
        "a key twice"
    );
    assert_eq!(read(r#"{"u":{"x":1},"u":{"x":1}}"#), None, "the key twice");
    assert_eq!(read(r#"{"u":{"x":1,}}"#), None, "not JSON");
}

#[test]
fn nulls_and_texts() {
    let body = br#"{"a":null,"b":"x\"y","c":"plain","d":7}"#;
    let [a, b, c, d] = fields(body, ["a", "b", "c", "d"]).unwrap();
    assert_eq!(not_null(body, a), None);
    assert_eq!(not_null(body, c.clone()), c);
    assert_eq!(text(body, b.unwrap()).as_deref(), Some("x\"y"));
    let plain = text(body, c.unwrap()).unwrap();
    assert!(
        matches!(plain, Cow::Borrowed("plain")),
        "no escapes: borrowed"
    );
    assert_eq!(text(body, d.unwrap()), None);
    let lone = br#"{"e":"\ud800"}"#;
    let [e] = fields(lone, ["e"]).unwrap();
    assert_eq!(text(lone, e.unwrap()), None);
}

#[test]
fn whole_numbers_only() {
    assert_eq!(whole_number(b"0"), Some(0));
    assert_eq!(whole_number(b"18446744073709551615"), Some(u64::MAX));
    for not in [
        &b"18446744073709551616"[..],
        b"-1",
        b"1.0",
        b"1e3",
        b"",
        b"null",
    ] {
        assert_eq!(whole_number(not), None);
    }
}

/// What is not JSON, and what is JSON but not plain, is left to serde_json.
#[test]
fn answers_only_for_plain_json_objects() {
    let deep = format!(
        "{{\"a\":{}1{}}}",
        "[".repeat(MAX_DEPTH),
        "]".repeat(MAX_DEPTH)
    );
    let too_deep = format!(
        "{{\"a\":{}1{}}}",
        "[".repeat(MAX_DEPTH + 1),
        "]".repeat(MAX_DEPTH + 1)
    );
    assert!(fields(deep.as_bytes(), ["a"]).is_some());
    assert!(fields(too_deep.as_bytes(), ["a"]).is_none());
    for plain in [
        "{}",
        r#"{"a":true,"b":false,"c":null,"d":0,"e":1.25E-7,"f":"\/\b\f\n\r\t\\"}"#,
        "{\"a\":\"é ✓\"}",
    ] {
        assert!(fields(plain.as_bytes(), ["a"]).is_some(), "{plain}");
        assert!(serde_json::from_str::<serde::de::IgnoredAny>(plain).is_ok());
    }
    for not_json in [
        "",
        "[]",
        "1",
        "{",
        "{\"a\"}",
        "{\"a\":}",
        "{\"a\":1,}",
        "{,}",
        "{\"a\":01}",
        "{\"a\":1.}",
        "{\"a\":.5}",
        "{\"a\":1e}",
        "{\"a\":-}",
        "{\"a\":+1}",
        "{\"a\":tru}",
        "{\"a\":nul}",
        "{\"a\":\"\\x\"}",
        "{\"a\":\"\\u12g4\"}",
        "{\"a\":\"\u{1}\"}",
        "{\"a\":[1,]}",
        "{\"a\":[1 2]}",
        "{\"a\":1} x",
        "{\"a\":1}}",
        "{a:1}",
        "{\"a\":'x'}",
        "{\"a\":\"x}",
        "{\"a\" 1}",
    ] {
        assert!(fields(not_json.as_bytes(), ["a"]).is_none(), "{not_json}");
        assert!(
            serde_json::from_str::<std::collections::BTreeMap<String, serde::de::IgnoredAny>>(
                not_json
            )
            .is_err(),
            "{not_json}"
        );
    }
    for not_plain in [r#"{"a":1,"a":2}"#, r#"{"\u0061":1}"#, r#"{"x\n":1}"#] {
        assert!(fields(not_plain.as_bytes(), ["a"]).is_none(), "{not_plain}");
    }
    // Twice, but not a key asked for: as serde_json skips it.
    assert!(fields(br#"{"b":1,"b":2}"#, ["a"]).is_some());
    assert!(fields(b"{\"a\":\"\xff\"}", ["a"]).is_none());
}

/// UTF-8 is checked from the first byte past ASCII to the end, once: what follows a valid
/// character, in that string or a later one, is checked too; a body of ASCII is not read
/// twice for it.
#[test]
fn text_past_ascii_is_utf8_to_the_end() {
    let ok = "{\"a\":\"caf\u{e9} \u{4e2d}\u{6587}\",\"b\":[\"\u{1f600}\"],\"c\":\"\u{e9}\"}";
    let [a, c] = fields(ok.as_bytes(), ["a", "c"]).unwrap();
    assert_eq!(&ok[a.unwrap()], "\"caf\u{e9} \u{4e2d}\u{6587}\"");
    assert_eq!(&ok[c.unwrap()], "\"\u{e9}\"");
    for bad in [
        &b"{\"a\":\"\xc3\xa9\xc3\"}"[..], // a character cut short, after a whole one
        b"{\"a\":\"\xc3\xa9\",\"b\":\"\xed\xa0\x80\"}", // a surrogate, in a later string
        b"{\"a\":\"\xc3\xa9\",\"b\":\"x\xc0\xaf\"}", // an overlong form
        b"{\"a\":\"\xf4\x90\x80\x80\"}",  // past U+10FFFF
        b"{\"a\":1,\xc3\xa9:2}",          // outside a string
    ] {
        assert!(fields(bad, ["a"]).is_none(), "{bad:?}");
        assert!(serde_json::from_slice::<serde_json::Value>(bad).is_err());
    }
}

/// A string's plain run is read sixteen and eight bytes at a time, then one at a time near
/// the body's end: whatever ends or breaks it (a quote, an escape, a control character, a byte
/// past ASCII, valid or not), at any place in a run of any length, before or after the body's
/// first byte past ASCII, is read as serde_json reads it.
#[test]
fn a_string_reads_alike_wherever_its_special_byte_is() {
    let specials: [&[u8]; 9] = [
        b"\"",
        b"\\n",
        b"\\u00e9",
        b"\x01",
        b"\x1f",
        b" ",
        b"\x7f",
        "\u{e9}".as_bytes(),
        b"\xff",
    ];
    for before in ["", "\u{4e2d}"] {
        for len in 0..40 {
            for at in 0..=len {
                for special in specials {
                    let mut body = format!("{{\"p\":\"{before}\",\"a\":\"").into_bytes();
                    body.extend(std::iter::repeat_n(b'x', at));
                    body.extend_from_slice(special);
                    body.extend(std::iter::repeat_n(b'y', len - at));
                    body.extend_from_slice(b"\",\"b\":12}");
                    let ours = fields(&body, ["a", "b"]);
                    let theirs = serde_json::from_slice::<serde_json::Value>(&body);
                    assert_eq!(ours.is_some(), theirs.is_ok(), "{:?}", body.escape_ascii());
                    if let Some([_, b]) = ours {
                        assert_eq!(&body[b.unwrap()], b"12");
                    }
                }
            }
        }
    }
}

/// A value skipped (no key asked for in it) is read whole, however its containers nest: what
/// serde_json takes is taken, what it refuses refused, at any depth, and the keys after it
/// are found where they are.
#[test]
fn a_skipped_value_reads_as_serde_json_reads_it() {
    let values = [
        "{}",
        "[]",
        "[{}]",
        "[[],[[]],{},[{}]]",
        r#"{"x":[1,{"y":[true,false,null,"s\"]"]}],"z":{}}"#,
        r#"[ { "a" : [ 1 , 2 ] } , "x" ]"#,
        "[\n\t{\"a\":\r\n{ }\n}\n]",
        "[{\"a\":1},]",
        "[{\"a\" 1}]",
        "[{1:2}]",
        "[{\"a\"}]",
        "[{\"a\":}]",
        "{\"a\":[}",
        "[{]",
        "[1,{\"a\":1,}]",
        "{\"a\":{\"b\":{}}",
        "[{\"a\":1}}",
        "{\"a\":[1]]",
        "[[[]]",
        "[,]",
        "{,}",
        "[{\"a\":1}{\"b\":2}]",
        "[{\"a\":1,\"a\":2}]",
        "[tru]",
        "[\"x]",
    ];
    let skipped = |value: &str| {
        let body = format!(r#"{{"b":{value},"a":7}}"#);
        let ours = fields(body.as_bytes(), ["a"]).map(|[a]| at(&body, &a).map(str::to_owned));
        let theirs = serde_json::from_str::<
            std::collections::BTreeMap<String, serde::de::IgnoredAny>,
        >(&body);
        assert_eq!(ours.is_some(), theirs.is_ok(), "{body}");
        ours
    };
    for value in values {
        if let Some(a) = skipped(value) {
            assert_eq!(a.as_deref(), Some("7"), "{value}");
        }
    }
    // Objects and arrays mixed, as deep as the scanner reads (`MAX_DEPTH` within the outer
    // object); deeper is left to serde_json.
    let nest = |n: usize| {
        let open: String = (0..n)
            .map(|d| if d % 2 == 0 { "[" } else { "{\"k\":" })
            .collect();
        let close: String = (0..n)
            .rev()
            .map(|d| if d % 2 == 0 { "]" } else { "}" })
            .collect();
        format!("{open}1{close}")
    };
    assert!(skipped(&nest(MAX_DEPTH)).is_some());
    let too_deep = format!(r#"{{"b":{},"a":7}}"#, nest(MAX_DEPTH + 1));
    assert!(fields(too_deep.as_bytes(), ["a"]).is_none());
}

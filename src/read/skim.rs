//! Skimming one JSON object's members without parsing their values: where
//! each member's value starts and ends in the text, found by jumping through
//! strings with `memchr` rather than reading them byte by byte. Pure.
//!
//! `nd7 search` uses it to rule entries out quickly ([`super::search`]); it
//! is only right on valid JSON, and says nothing (`None`) about a member name
//! written with escapes, since it compares names as bytes. Callers treat
//! `None` as "cannot tell" and parse the line whole.

use std::ops::Range;

/// The members of the object that starts at `text[at]` (after whitespace):
/// each name's raw bytes (between its quotes) and its value's span. `None`
/// when the text is not an object this can read, or a name holds a `\`.
pub fn members(text: &[u8], at: usize) -> Option<Vec<(&[u8], Range<usize>)>> {
    let mut at = blank(text, at);
    if text.get(at) != Some(&b'{') {
        return None;
    }
    at = blank(text, at + 1);
    let mut out = Vec::new();
    if text.get(at) == Some(&b'}') {
        return Some(out);
    }
    loop {
        if text.get(at) != Some(&b'"') {
            return None;
        }
        let name_end = string_end(text, at)?;
        let name = &text[at + 1..name_end - 1];
        if name.contains(&b'\\') {
            return None;
        }
        at = blank(text, name_end);
        if text.get(at) != Some(&b':') {
            return None;
        }
        let start = blank(text, at + 1);
        let end = value_end(text, start)?;
        out.push((name, start..end));
        at = blank(text, end);
        match text.get(at) {
            Some(b',') => at = blank(text, at + 1),
            Some(b'}') => return Some(out),
            _ => return None,
        }
    }
}

/// The first byte at or after `at` that is not JSON whitespace.
fn blank(text: &[u8], mut at: usize) -> usize {
    while matches!(text.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// The index just past the closing quote of the string opening at
/// `text[at]`: the first quote after it not escaped, that is not preceded by
/// an odd run of backslashes. Looking for quotes alone, rather than stopping
/// at every escape, keeps `memchr` on long runs in text full of `\n`.
fn string_end(text: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    loop {
        i += memchr::memchr(b'"', text.get(i..)?)?;
        let run = text[at + 1..i]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        if run % 2 == 0 {
            return Some(i + 1);
        }
        i += 1;
    }
}

/// The index just past the value starting at `text[at]`.
fn value_end(text: &[u8], at: usize) -> Option<usize> {
    match text.get(at)? {
        b'"' => string_end(text, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            loop {
                match text.get(i)? {
                    b'"' => {
                        i = string_end(text, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let len = text[at..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                .unwrap_or(text.len() - at);
            (len > 0).then_some(at + len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    fn names_and_values(text: &str) -> Option<Vec<(String, Value)>> {
        let b = text.as_bytes();
        members(b, 0).map(|m| {
            m.into_iter()
                .map(|(n, r)| {
                    (
                        String::from_utf8(n.to_vec()).expect("utf-8"),
                        serde_json::from_slice(&b[r]).expect("a value's span is a value"),
                    )
                })
                .collect()
        })
    }

    #[test]
    fn spans_are_the_values() {
        let got = names_and_values(
            r#" { "a" : "x\"}\\" , "b":{"c":["]",{"d":1}]},"e":-1.5e3,"f":null,"g":[] } "#,
        )
        .expect("members");
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b", "e", "f", "g"]);
        assert_eq!(got[0].1, Value::from("x\"}\\"));
        assert_eq!(got[1].1, serde_json::json!({"c": ["]", {"d": 1}]}));
        assert_eq!(names_and_values("{}"), Some(Vec::new()));
        assert_eq!(names_and_values(r#"{"t\u0061":1}"#), None);
        assert_eq!(names_and_values(r#"["a"]"#), None);
        assert_eq!(names_and_values(r#"{"a":"unterminated}"#), None);
    }

    proptest! {
        /// On any object serde_json writes, the members are serde_json's own
        /// (names, order and values).
        #[test]
        fn members_agree_with_serde_json(v in any_object()) {
            let text = serde_json::to_string(&v).expect("json");
            let got = names_and_values(&text).expect("members");
            let want: Vec<(String, Value)> = v
                .as_object()
                .expect("object")
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            prop_assert_eq!(got, want);
        }
    }

    fn any_object() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[a-z\"\\\\{}\\[\\],: \n\u{1}é]{0,12}".prop_map(Value::from),
        ];
        let tree = leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map("[a-z]{1,3}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        });
        prop::collection::btree_map("[a-z]{1,4}", tree, 0..5)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }
}

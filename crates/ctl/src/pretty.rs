//! Pretty-printing of the API's JSON text in the broker's key order (serde_json's `Value`
//! would sort object keys): two-space indents, as `serde_json::to_string_pretty`.

/// The JSON text re-indented, or None when it is not valid JSON.
pub fn pretty(text: &str) -> Option<String> {
    serde_json::from_str::<serde_json::Value>(text).ok()?;
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() * 2);
    let mut depth = 0usize;
    let mut i = 0;
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' => {
                // Copy the string with its escapes.
                out.push(c);
                i += 1;
                while i < chars.len() {
                    out.push(chars[i]);
                    if chars[i] == '\\' {
                        i += 1;
                        if let Some(&escaped) = chars.get(i) {
                            out.push(escaped);
                        }
                    } else if chars[i] == '"' {
                        break;
                    }
                    i += 1;
                }
            }
            '{' | '[' => {
                let close = if c == '{' { '}' } else { ']' };
                let next = chars[i + 1..].iter().position(|c| !c.is_whitespace());
                if next.is_some_and(|n| chars[i + 1 + n] == close) {
                    out.push(c);
                    out.push(close);
                    i += 1 + next.unwrap_or(0);
                } else {
                    out.push(c);
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
        i += 1;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    #[test]
    fn keeps_key_order_and_matches_serde_layout() {
        let text = r#"{"zeta": 1, "alpha" : [1, {"b":"x,:{}\"]"}, [], { }], "n": null}"#;
        let pretty = pretty(text).unwrap();
        assert_eq!(
            pretty,
            "{\n  \"zeta\": 1,\n  \"alpha\": [\n    1,\n    {\n      \"b\": \"x,:{}\\\"]\"\n    \
             },\n    [],\n    {}\n  ],\n  \"n\": null\n}"
        );
        assert_eq!(
            serde_json::from_str::<Value>(&pretty).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
        let value = json!({"a": [1, 2, {"c": []}], "d": "é"});
        assert_eq!(
            super::pretty(&value.to_string()).unwrap(),
            serde_json::to_string_pretty(&value).unwrap()
        );
        assert_eq!(super::pretty("[]").unwrap(), "[]");
        assert_eq!(super::pretty("{oops"), None);
    }
}

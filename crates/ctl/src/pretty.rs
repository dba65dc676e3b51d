//! Pretty-printing of the API's JSON in the broker's key order (serde_json's
//! `preserve_order` keeps objects as the broker wrote them).

/// The JSON text re-indented, or None when it is not valid JSON.
pub fn pretty(text: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    serde_json::to_string_pretty(&value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_key_order_and_matches_serde_layout() {
        let text = r#"{"zeta":1,"alpha":[1,{"b":"x\"y","a":null}],"empty":{},"list":[]}"#;
        let out = pretty(text).unwrap();
        let zeta = out.find("zeta").unwrap();
        let alpha = out.find("alpha").unwrap();
        assert!(zeta < alpha, "broker's order kept: {out}");
        assert!(out.find("\"b\"").unwrap() < out.find("\"a\"").unwrap());
        assert!(out.contains("\n  \"alpha\": [\n    1,"), "{out}");
        assert!(pretty("{not json").is_none());
    }
}

//! `ShortStr`: the 0.9.1 `shortstr`, at most 255 bytes of UTF-8, held as a `Bytes` slice (usually
//! of the read buffer, so decoding does not copy) checked once, when it is made (`ByteString`):
//! reading it as a `str` costs nothing. `LongStr` is plain `Bytes`: `longstr` is binary.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

use bytes::Bytes;
use bytestring::ByteString;

/// A `longstr`: up to 4 GiB of arbitrary bytes.
pub type LongStr = Bytes;

/// A short string: at most 255 bytes of UTF-8, held as a `Bytes` slice (usually of the read
/// buffer: no copy).
///
/// Equality, ordering and hashing are those of the `str`, so a `HashMap<ShortStr, _>` can be
/// looked up with a `&str`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ShortStr(ByteString);

impl ShortStr {
    /// The longest short string, in bytes.
    pub const MAX_LEN: usize = 255;

    /// A short string of a static `str`. `s` must be at most 255 bytes (checked in debug builds
    /// and at compile time in const contexts).
    pub const fn from_static(s: &'static str) -> ShortStr {
        debug_assert!(
            s.len() <= ShortStr::MAX_LEN,
            "a shortstr is at most 255 bytes"
        );
        ShortStr(ByteString::from_static(s))
    }

    /// Whether `bytes` make a short string: at most 255 bytes of UTF-8 (the rule `from_utf8`
    /// applies to owned bytes; this one borrows).
    pub fn fits(bytes: &[u8]) -> bool {
        bytes.len() <= ShortStr::MAX_LEN && (bytes.is_ascii() || std::str::from_utf8(bytes).is_ok())
    }

    /// A reply text: `text` itself when it fits, else its first 252 bytes at most (ending at a
    /// char boundary) and `...`, as RabbitMQ cuts a long explanation, so that a client can see
    /// the text was cut.
    pub fn elided(text: &str) -> ShortStr {
        const MARK: &str = "...";
        if text.len() <= ShortStr::MAX_LEN {
            return ShortStr::from(text);
        }
        let keep = prefix_len(text, ShortStr::MAX_LEN - MARK.len());
        ShortStr::from(format!("{}{MARK}", &text[..keep]))
    }

    /// The string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The UTF-8 bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The underlying `Bytes` (a cheap reference-counted clone).
    pub fn to_bytes(&self) -> Bytes {
        self.0.as_bytes().clone()
    }

    /// The underlying `Bytes`, without touching its reference count.
    pub fn into_bytes(self) -> Bytes {
        self.0.into_bytes()
    }

    /// Length in bytes (at most 255).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the string is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The longest prefix of `s` that fits a shortstr and ends at a char boundary.
fn truncated_len(s: &str) -> usize {
    prefix_len(s, ShortStr::MAX_LEN)
}

/// The length of the longest prefix of `s` of at most `max` bytes that ends at a char boundary.
fn prefix_len(s: &str, max: usize) -> usize {
    if s.len() <= max {
        return s.len();
    }
    (0..=max)
        .rev()
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(0)
}

/// Copies `s`; a string longer than 255 bytes is truncated at a char boundary (reply texts may be
/// long, and a truncated text is better than none).
impl From<&str> for ShortStr {
    fn from(s: &str) -> ShortStr {
        let len = truncated_len(s);
        ShortStr(ByteString::from(s.get(..len).unwrap_or_default()))
    }
}

/// Takes over the `String`'s buffer; longer than 255 bytes: truncated at a char boundary.
impl From<String> for ShortStr {
    fn from(s: String) -> ShortStr {
        let len = truncated_len(&s);
        let mut s = s;
        s.truncate(len);
        ShortStr(ByteString::from(s))
    }
}

impl From<&String> for ShortStr {
    fn from(s: &String) -> ShortStr {
        ShortStr::from(s.as_str())
    }
}

impl Hash for ShortStr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl Borrow<str> for ShortStr {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl Deref for ShortStr {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for ShortStr {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq<str> for ShortStr {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ShortStr {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Debug for ShortStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for ShortStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn long_strings_truncate_at_a_char_boundary() {
        let s = "é".repeat(200); // 400 bytes, 2 per char
        let short = ShortStr::from(s.as_str());
        assert_eq!(short.len(), 254);
        assert!(short.as_str().chars().all(|c| c == 'é'));
        assert_eq!(ShortStr::from(s), short);
        assert_eq!(ShortStr::from("x".repeat(300)).len(), 255);
    }

    #[test]
    fn long_reply_texts_end_with_an_ellipsis() {
        assert_eq!(
            ShortStr::elided("NOT_FOUND - no queue 'q'").as_str(),
            "NOT_FOUND - no queue 'q'"
        );
        let exact = "x".repeat(255);
        assert_eq!(ShortStr::elided(&exact).as_str(), exact);
        let long = ShortStr::elided(&"x".repeat(300));
        assert_eq!(long.len(), 255);
        assert_eq!(long.as_str(), format!("{}...", "x".repeat(252)));
        // 2-byte chars: 252 is a boundary, so 126 of them and the mark.
        let accents = ShortStr::elided(&"é".repeat(200));
        assert_eq!(accents.as_str(), format!("{}...", "é".repeat(126)));
        // A 3-byte char across byte 252 is left out whole.
        let text = format!("{}€€", "x".repeat(251));
        assert_eq!(
            ShortStr::elided(&format!("{text}{}", "y".repeat(10))).as_str(),
            format!("{}...", "x".repeat(251))
        );
    }

    #[test]
    fn hash_map_lookup_by_str() {
        let mut map = HashMap::new();
        map.insert(ShortStr::from("orders"), 1);
        assert_eq!(map.get("orders"), Some(&1));
        assert_eq!(format!("{:?}", ShortStr::from_static("a\"b")), "\"a\\\"b\"");
        assert_eq!(
            ShortStr::from_static("amq.direct").to_string(),
            "amq.direct"
        );
    }
}

impl ShortStr {
    /// Wraps `bytes` without copying, checking that they are UTF-8 and at most 255 bytes
    /// (strings that arrive in another container, such as a message a queue holds).
    pub fn from_utf8(bytes: Bytes) -> Result<ShortStr, crate::amqp091::DecodeError> {
        let invalid = crate::amqp091::DecodeError::InvalidUtf8 {
            context: "shortstr",
            field: "value",
            offset: 0,
        };
        if bytes.len() > ShortStr::MAX_LEN {
            return Err(invalid);
        }
        ByteString::try_from(bytes)
            .map(ShortStr)
            .map_err(|_| invalid)
    }
}

#[cfg(test)]
mod from_utf8_tests {
    use super::*;

    #[test]
    fn from_utf8_checks_length_and_encoding() {
        let ok = ShortStr::from_utf8(Bytes::from_static(b"orders")).unwrap();
        assert_eq!(ok.as_str(), "orders");
        assert!(ShortStr::from_utf8(Bytes::from_static(b"\xff")).is_err());
        assert!(ShortStr::fits(b"orders") && ShortStr::fits("r\u{e9}gion".as_bytes()));
        assert!(!ShortStr::fits(b"\xff") && !ShortStr::fits(&[b'a'; 256]));
        assert!(ShortStr::from_utf8(Bytes::from(vec![b'a'; 256])).is_err());
        assert_eq!(
            ShortStr::from_utf8(Bytes::from(vec![b'a'; 255]))
                .unwrap()
                .len(),
            255
        );
    }
}

//! The basic class's content-header properties.
//!
//! Layout (the part of a content-header payload after class-id, weight and body-size): a `u16`
//! property-flags word, bit 15 for the first property (content-type) down to bit 2 for the 14th
//! (cluster-id); bit 1 is reserved and bit 0 would announce another flags word, which basic never
//! needs. Then the values of the present properties, in order, with no padding.
//!
//! The broker keeps properties raw (`ContentHeader::properties`) and passes them through; it
//! validates them once with `validate_properties` and reads the two fields routing needs with the
//! `peek_*` walks, none of which allocate.

use bytes::{BufMut, Bytes, BytesMut};

use super::error::DecodeError;
use super::field_table::{self, FieldTable, FIELD_DEPTH_MAX};
use super::short_str::ShortStr;
use super::wire::{self, Cursor, Decoder};

const CONTEXT: &str = "basic properties";

/// Flag bits that basic does not use: reserved (1) and continuation (0).
const UNUSED_FLAGS: u16 = 0b11;

/// The wire type of each property, in flag order.
#[derive(Clone, Copy)]
enum Kind {
    ShortStr,
    Table,
    Octet,
    Timestamp,
}

/// The properties in wire order, with the spec's names (used in error texts).
const LAYOUT: [(&str, Kind); 14] = [
    ("content-type", Kind::ShortStr),
    ("content-encoding", Kind::ShortStr),
    ("headers", Kind::Table),
    ("delivery-mode", Kind::Octet),
    ("priority", Kind::Octet),
    ("correlation-id", Kind::ShortStr),
    ("reply-to", Kind::ShortStr),
    ("expiration", Kind::ShortStr),
    ("message-id", Kind::ShortStr),
    ("timestamp", Kind::Timestamp),
    ("type", Kind::ShortStr),
    ("user-id", Kind::ShortStr),
    ("app-id", Kind::ShortStr),
    ("cluster-id", Kind::ShortStr),
];

const DELIVERY_MODE_INDEX: usize = 3;
const PRIORITY_INDEX: usize = 4;

/// The flag bit of the property at `index` in `LAYOUT`.
const fn flag(index: usize) -> u16 {
    1 << (15 - index)
}

/// The 14 basic-class properties; `None` means absent (its flag bit is clear).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct BasicProperties {
    pub content_type: Option<ShortStr>,
    pub content_encoding: Option<ShortStr>,
    pub headers: Option<FieldTable>,
    /// 1 non-persistent, 2 persistent.
    pub delivery_mode: Option<u8>,
    pub priority: Option<u8>,
    pub correlation_id: Option<ShortStr>,
    pub reply_to: Option<ShortStr>,
    pub expiration: Option<ShortStr>,
    pub message_id: Option<ShortStr>,
    pub timestamp: Option<u64>,
    /// The spec's `type`.
    pub kind: Option<ShortStr>,
    pub user_id: Option<ShortStr>,
    pub app_id: Option<ShortStr>,
    pub cluster_id: Option<ShortStr>,
}

impl BasicProperties {
    /// Decodes `raw`: the property-flags word followed by the property list (a content-header
    /// payload after class-id, weight and body-size). Strings are slices of `raw` (no copy).
    pub fn decode(raw: &Bytes) -> Result<BasicProperties, DecodeError> {
        let mut d = Decoder::new(raw, CONTEXT);
        let flags = read_flags(d.cursor())?;
        let has = |index: usize| flags & flag(index) != 0;
        let shortstr = |d: &mut Decoder<'_>, index: usize| -> Result<_, DecodeError> {
            let (name, _) = LAYOUT.get(index).copied().unwrap_or(("?", Kind::ShortStr));
            if has(index) {
                d.shortstr(name).map(Some)
            } else {
                Ok(None)
            }
        };
        let properties = BasicProperties {
            content_type: shortstr(&mut d, 0)?,
            content_encoding: shortstr(&mut d, 1)?,
            headers: if has(2) {
                Some(d.table("headers")?)
            } else {
                None
            },
            delivery_mode: if has(3) {
                Some(d.octet("delivery-mode")?)
            } else {
                None
            },
            priority: if has(4) {
                Some(d.octet("priority")?)
            } else {
                None
            },
            correlation_id: shortstr(&mut d, 5)?,
            reply_to: shortstr(&mut d, 6)?,
            expiration: shortstr(&mut d, 7)?,
            message_id: shortstr(&mut d, 8)?,
            timestamp: if has(9) {
                Some(d.longlong("timestamp")?)
            } else {
                None
            },
            kind: shortstr(&mut d, 10)?,
            user_id: shortstr(&mut d, 11)?,
            app_id: shortstr(&mut d, 12)?,
            cluster_id: shortstr(&mut d, 13)?,
        };
        d.finish()?;
        Ok(properties)
    }

    /// Writes the flags word and the present properties, in the same layout as `decode` reads.
    pub fn encode(&self, out: &mut BytesMut) {
        let flags_at = out.len();
        out.put_u16(0);
        let mut flags = 0u16;
        let mut shortstr = |out: &mut BytesMut, index: usize, value: &Option<ShortStr>| {
            if let Some(s) = value {
                flags |= flag(index);
                wire::put_shortstr(out, s);
            }
        };
        shortstr(out, 0, &self.content_type);
        shortstr(out, 1, &self.content_encoding);
        if let Some(headers) = &self.headers {
            headers.encode(out);
        }
        if let Some(mode) = self.delivery_mode {
            out.put_u8(mode);
        }
        if let Some(priority) = self.priority {
            out.put_u8(priority);
        }
        shortstr(out, 5, &self.correlation_id);
        shortstr(out, 6, &self.reply_to);
        shortstr(out, 7, &self.expiration);
        shortstr(out, 8, &self.message_id);
        if let Some(timestamp) = self.timestamp {
            out.put_u64(timestamp);
        }
        shortstr(out, 10, &self.kind);
        shortstr(out, 11, &self.user_id);
        shortstr(out, 12, &self.app_id);
        shortstr(out, 13, &self.cluster_id);
        flags |= self.non_string_flags();
        if let Some(word) = out.get_mut(flags_at..flags_at + 2) {
            word.copy_from_slice(&flags.to_be_bytes());
        }
    }

    /// The flag bits of the properties that are not short strings.
    fn non_string_flags(&self) -> u16 {
        let bit = |present: bool, index: usize| if present { flag(index) } else { 0 };
        bit(self.headers.is_some(), 2)
            | bit(self.delivery_mode.is_some(), DELIVERY_MODE_INDEX)
            | bit(self.priority.is_some(), PRIORITY_INDEX)
            | bit(self.timestamp.is_some(), 9)
    }
}

fn read_flags(c: &mut Cursor<'_>) -> Result<u16, DecodeError> {
    let flags = c.short("property-flags")?;
    if flags & UNUSED_FLAGS != 0 {
        return Err(DecodeError::BadPropertyFlags { flags });
    }
    Ok(flags)
}

/// Checks raw properties (flags word and list) exactly as `BasicProperties::decode` would, without
/// allocating: if this succeeds, `decode` succeeds.
pub fn validate_properties(raw: &[u8]) -> Result<(), DecodeError> {
    let mut c = Cursor::new(raw, CONTEXT);
    let flags = read_flags(&mut c)?;
    for (index, (name, kind)) in LAYOUT.iter().enumerate() {
        if flags & flag(index) == 0 {
            continue;
        }
        match kind {
            Kind::ShortStr => c.shortstr(name).map(drop)?,
            Kind::Table => field_table::skip_table(&mut c, name, FIELD_DEPTH_MAX)?,
            Kind::Octet => c.octet(name).map(drop)?,
            Kind::Timestamp => c.longlong(name).map(drop)?,
        }
    }
    c.finish()
}

/// The delivery-mode of raw properties, if present; `None` if absent or malformed. Does not
/// validate the properties before it (see `validate_properties`).
pub fn peek_delivery_mode(raw: &[u8]) -> Option<u8> {
    peek_octet(raw, DELIVERY_MODE_INDEX)
}

/// The priority of raw properties, if present; `None` if absent or malformed.
pub fn peek_priority(raw: &[u8]) -> Option<u8> {
    peek_octet(raw, PRIORITY_INDEX)
}

/// Skips the properties before `target` (an octet property) and reads it.
fn peek_octet(raw: &[u8], target: usize) -> Option<u8> {
    let mut c = Cursor::new(raw, CONTEXT);
    let flags = c.short("property-flags").ok()?;
    if flags & flag(target) == 0 {
        return None;
    }
    for (index, (name, kind)) in LAYOUT.iter().enumerate().take(target) {
        if flags & flag(index) == 0 {
            continue;
        }
        match kind {
            Kind::ShortStr => {
                let len = c.octet(name).ok()?;
                c.take(usize::from(len), name).ok()?;
            }
            Kind::Table => {
                c.long_prefixed(name).ok()?;
            }
            Kind::Octet => {
                c.octet(name).ok()?;
            }
            Kind::Timestamp => {
                c.longlong(name).ok()?;
            }
        }
    }
    c.octet("property").ok()
}

#[cfg(test)]
#[path = "properties_test.rs"]
mod tests;

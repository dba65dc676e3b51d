//! A deliberately small AMQP 0.9.1 codec for raw-socket tests.
//!
//! It is written from the spec (not shared with the broker or lapin) so that a test can build any
//! byte sequence, including wrong ones, and read back exactly what the broker sent. Frame layout:
//! `type:u8 channel:u16 size:u32 payload[size] 0xCE`. Method payload: `class:u16 method:u16 args`.
//! Field values use RabbitMQ's type letters (`t b B s u I i l f d D S A T F V x`).

/// The protocol header a 0.9.1 client sends first, and the one a server answers with when it
/// does not like the header it received.
pub const PROTOCOL_HEADER: &[u8; 8] = b"AMQP\x00\x00\x09\x01";

pub const FRAME_METHOD: u8 = 1;
pub const FRAME_HEADER: u8 = 2;
pub const FRAME_BODY: u8 = 3;
pub const FRAME_HEARTBEAT: u8 = 8;
pub const FRAME_END: u8 = 0xCE;

/// Reply codes from the spec, named as RabbitMQ names them.
pub mod reply {
    pub const CONTENT_TOO_LARGE: u16 = 311;
    pub const NO_ROUTE: u16 = 312;
    pub const CONNECTION_FORCED: u16 = 320;
    pub const ACCESS_REFUSED: u16 = 403;
    pub const NOT_FOUND: u16 = 404;
    pub const RESOURCE_LOCKED: u16 = 405;
    pub const PRECONDITION_FAILED: u16 = 406;
    pub const FRAME_ERROR: u16 = 501;
    pub const SYNTAX_ERROR: u16 = 502;
    pub const COMMAND_INVALID: u16 = 503;
    pub const CHANNEL_ERROR: u16 = 504;
    pub const UNEXPECTED_FRAME: u16 = 505;
    pub const NOT_ALLOWED: u16 = 530;
    pub const NOT_IMPLEMENTED: u16 = 540;
    pub const INTERNAL_ERROR: u16 = 541;
}

/// (class id, method id) pairs used by the raw tests.
pub mod method {
    pub const CONNECTION_START: (u16, u16) = (10, 10);
    pub const CONNECTION_START_OK: (u16, u16) = (10, 11);
    pub const CONNECTION_SECURE: (u16, u16) = (10, 20);
    pub const CONNECTION_TUNE: (u16, u16) = (10, 30);
    pub const CONNECTION_TUNE_OK: (u16, u16) = (10, 31);
    pub const CONNECTION_OPEN: (u16, u16) = (10, 40);
    pub const CONNECTION_OPEN_OK: (u16, u16) = (10, 41);
    pub const CONNECTION_CLOSE: (u16, u16) = (10, 50);
    pub const CONNECTION_CLOSE_OK: (u16, u16) = (10, 51);
    pub const CONNECTION_BLOCKED: (u16, u16) = (10, 60);
    pub const CONNECTION_UNBLOCKED: (u16, u16) = (10, 61);
    pub const CONNECTION_UPDATE_SECRET: (u16, u16) = (10, 70);
    pub const CONNECTION_UPDATE_SECRET_OK: (u16, u16) = (10, 71);
    pub const CHANNEL_OPEN: (u16, u16) = (20, 10);
    pub const CHANNEL_OPEN_OK: (u16, u16) = (20, 11);
    pub const CHANNEL_FLOW: (u16, u16) = (20, 20);
    pub const CHANNEL_FLOW_OK: (u16, u16) = (20, 21);
    pub const CHANNEL_CLOSE: (u16, u16) = (20, 40);
    pub const CHANNEL_CLOSE_OK: (u16, u16) = (20, 41);
    pub const EXCHANGE_DECLARE: (u16, u16) = (40, 10);
    pub const QUEUE_DECLARE: (u16, u16) = (50, 10);
    pub const QUEUE_DECLARE_OK: (u16, u16) = (50, 11);
    pub const BASIC_QOS: (u16, u16) = (60, 10);
    pub const BASIC_CONSUME: (u16, u16) = (60, 20);
    pub const BASIC_CONSUME_OK: (u16, u16) = (60, 21);
    pub const BASIC_PUBLISH: (u16, u16) = (60, 40);
    pub const BASIC_RETURN: (u16, u16) = (60, 50);
    pub const BASIC_DELIVER: (u16, u16) = (60, 60);
    pub const BASIC_GET: (u16, u16) = (60, 70);
    pub const BASIC_GET_OK: (u16, u16) = (60, 71);
    pub const BASIC_GET_EMPTY: (u16, u16) = (60, 72);
    pub const BASIC_ACK: (u16, u16) = (60, 80);
    pub const BASIC_NACK: (u16, u16) = (60, 120);
    pub const TX_SELECT: (u16, u16) = (90, 10);
    pub const TX_SELECT_OK: (u16, u16) = (90, 11);
    pub const CONFIRM_SELECT: (u16, u16) = (85, 10);
    pub const CONFIRM_SELECT_OK: (u16, u16) = (85, 11);
}

/// One frame as read off the socket.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub kind: u8,
    pub channel: u16,
    pub payload: Vec<u8>,
}

impl Frame {
    /// Class and method ids when this is a method frame.
    pub fn method_id(&self) -> Option<(u16, u16)> {
        if self.kind != FRAME_METHOD || self.payload.len() < 4 {
            return None;
        }
        let class = u16::from_be_bytes([self.payload[0], self.payload[1]]);
        let method = u16::from_be_bytes([self.payload[2], self.payload[3]]);
        Some((class, method))
    }

    /// A reader over the method arguments (after class and method ids).
    pub fn args(&self) -> Reader<'_> {
        Reader::new(self.payload.get(4..).unwrap_or(&[]))
    }

    pub fn is_heartbeat(&self) -> bool {
        self.kind == FRAME_HEARTBEAT
    }
}

/// Encodes a whole frame, with the given type, channel and payload, and the frame-end octet.
pub fn frame(kind: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let size = u32::try_from(payload.len()).expect("invariant: test payloads fit in u32");
    let mut out = Vec::with_capacity(payload.len() + 8);
    out.push(kind);
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(payload);
    out.push(FRAME_END);
    out
}

/// Encodes a method frame from (class, method) and already-encoded arguments.
pub fn method_frame(channel: u16, id: (u16, u16), args: &[u8]) -> Vec<u8> {
    let mut payload = Vec::with_capacity(args.len() + 4);
    payload.extend_from_slice(&id.0.to_be_bytes());
    payload.extend_from_slice(&id.1.to_be_bytes());
    payload.extend_from_slice(args);
    frame(FRAME_METHOD, channel, &payload)
}

/// A basic-class content header frame with no properties set.
pub fn content_header_frame(channel: u16, body_size: u64) -> Vec<u8> {
    let payload = Args::new()
        .short(60)
        .short(0)
        .longlong(body_size)
        .short(0)
        .build();
    frame(FRAME_HEADER, channel, &payload)
}

/// The basic.publish method frame alone (no content): a message's first frame.
pub fn basic_publish(channel: u16, exchange: &str, routing_key: &str, mandatory: bool) -> Vec<u8> {
    let args = Args::new()
        .short(0)
        .shortstr(exchange)
        .shortstr(routing_key)
        .bits(&[mandatory, false])
        .build();
    method_frame(channel, method::BASIC_PUBLISH, &args)
}

/// basic.publish, its content header and as many body frames as `frame_max` requires.
pub fn publish_frames(
    channel: u16,
    exchange: &str,
    routing_key: &str,
    mandatory: bool,
    body: &[u8],
    frame_max: u32,
) -> Vec<u8> {
    let mut out = basic_publish(channel, exchange, routing_key, mandatory);
    let body_size = u64::try_from(body.len()).expect("invariant: usize fits u64");
    out.extend(content_header_frame(channel, body_size));
    let chunk = usize::try_from(frame_max).expect("invariant: u32 fits usize") - 8;
    for piece in body.chunks(chunk) {
        out.extend(frame(FRAME_BODY, channel, piece));
    }
    out
}

/// The heartbeat frame (type 8, channel 0, empty payload).
pub fn heartbeat_frame() -> Vec<u8> {
    frame(FRAME_HEARTBEAT, 0, &[])
}

/// Builder for method arguments, in spec field order. Consecutive bits are packed by the caller
/// with [`Args::bits`], as the spec packs them into one octet.
#[derive(Debug, Default, Clone)]
pub struct Args(Vec<u8>);

impl Args {
    pub fn new() -> Args {
        Args(Vec::new())
    }
    pub fn octet(mut self, value: u8) -> Args {
        self.0.push(value);
        self
    }
    pub fn short(mut self, value: u16) -> Args {
        self.0.extend_from_slice(&value.to_be_bytes());
        self
    }
    pub fn long(mut self, value: u32) -> Args {
        self.0.extend_from_slice(&value.to_be_bytes());
        self
    }
    pub fn longlong(mut self, value: u64) -> Args {
        self.0.extend_from_slice(&value.to_be_bytes());
        self
    }
    /// Packs up to eight booleans into one octet, first one in the lowest bit.
    pub fn bits(self, values: &[bool]) -> Args {
        assert!(
            values.len() <= 8,
            "invariant: one octet holds at most 8 bits"
        );
        let packed = values
            .iter()
            .enumerate()
            .fold(0u8, |acc, (i, bit)| acc | (u8::from(*bit) << i));
        self.octet(packed)
    }
    pub fn shortstr(mut self, value: &str) -> Args {
        let len = u8::try_from(value.len()).expect("invariant: shortstr is under 256 bytes");
        self.0.push(len);
        self.0.extend_from_slice(value.as_bytes());
        self
    }
    pub fn longstr(mut self, value: &[u8]) -> Args {
        let len = u32::try_from(value.len()).expect("invariant: longstr fits in u32");
        self.0.extend_from_slice(&len.to_be_bytes());
        self.0.extend_from_slice(value);
        self
    }
    /// A field table with the given pre-encoded entries (see [`table_entry_bool`]).
    pub fn table(self, entries: &[u8]) -> Args {
        self.longstr(entries)
    }
    pub fn raw(mut self, bytes: &[u8]) -> Args {
        self.0.extend_from_slice(bytes);
        self
    }
    pub fn build(self) -> Vec<u8> {
        self.0
    }
}

/// One encoded field-table entry `name -> bool`.
pub fn table_entry_bool(name: &str, value: bool) -> Vec<u8> {
    Args::new()
        .shortstr(name)
        .octet(b't')
        .octet(u8::from(value))
        .build()
}

/// One encoded field-table entry `name -> longstr`.
pub fn table_entry_str(name: &str, value: &str) -> Vec<u8> {
    Args::new()
        .shortstr(name)
        .octet(b'S')
        .longstr(value.as_bytes())
        .build()
}

/// One encoded field-table entry `name -> table` (entries already encoded).
pub fn table_entry_table(name: &str, entries: &[u8]) -> Vec<u8> {
    Args::new()
        .shortstr(name)
        .octet(b'F')
        .longstr(entries)
        .build()
}

/// A decoded field value.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    Bool(bool),
    I8(i8),
    U8(u8),
    I16(i16),
    U16(u16),
    I32(i32),
    U32(u32),
    I64(i64),
    F32(f32),
    F64(f64),
    Decimal(u8, u32),
    LongStr(Vec<u8>),
    Array(Vec<FieldValue>),
    Timestamp(u64),
    Table(Vec<(String, FieldValue)>),
    Void,
    Bytes(Vec<u8>),
}

impl FieldValue {
    pub fn as_str(&self) -> Option<String> {
        match self {
            FieldValue::LongStr(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
            _ => None,
        }
    }
    pub fn as_table(&self) -> Option<&[(String, FieldValue)]> {
        match self {
            FieldValue::Table(entries) => Some(entries),
            _ => None,
        }
    }
}

/// Looks a key up in a decoded table.
pub fn table_get<'a>(table: &'a [(String, FieldValue)], key: &str) -> Option<&'a FieldValue> {
    table
        .iter()
        .find(|(name, _)| name == key)
        .map(|(_, value)| value)
}

/// Reads method arguments; every read panics with the offset when the broker sent too few bytes,
/// since a short reply from the broker is a test failure.
#[derive(Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    offset: usize,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, offset: 0 }
    }
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.offset
    }
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let end = self.offset + n;
        assert!(
            end <= self.bytes.len(),
            "broker sent a short method: wanted {n} bytes at offset {}, have {}",
            self.offset,
            self.bytes.len()
        );
        let slice = &self.bytes[self.offset..end];
        self.offset = end;
        slice
    }
    pub fn octet(&mut self) -> u8 {
        self.take(1)[0]
    }
    pub fn short(&mut self) -> u16 {
        let b = self.take(2);
        u16::from_be_bytes([b[0], b[1]])
    }
    pub fn long(&mut self) -> u32 {
        let b = self.take(4);
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
    pub fn longlong(&mut self) -> u64 {
        let b = self.take(8);
        u64::from_be_bytes(b.try_into().expect("invariant: took 8 bytes"))
    }
    pub fn shortstr(&mut self) -> String {
        let len = usize::from(self.octet());
        String::from_utf8_lossy(self.take(len)).into_owned()
    }
    pub fn longstr(&mut self) -> Vec<u8> {
        let len = usize::try_from(self.long()).expect("invariant: u32 fits usize");
        self.take(len).to_vec()
    }
    pub fn table(&mut self) -> Vec<(String, FieldValue)> {
        let len = usize::try_from(self.long()).expect("invariant: u32 fits usize");
        let mut inner = Reader::new(self.take(len));
        let mut entries = Vec::new();
        while inner.remaining() > 0 {
            let name = inner.shortstr();
            let value = inner.field_value();
            entries.push((name, value));
        }
        entries
    }
    fn array(&mut self) -> Vec<FieldValue> {
        let len = usize::try_from(self.long()).expect("invariant: u32 fits usize");
        let mut inner = Reader::new(self.take(len));
        let mut values = Vec::new();
        while inner.remaining() > 0 {
            values.push(inner.field_value());
        }
        values
    }
    pub fn field_value(&mut self) -> FieldValue {
        let tag = self.octet();
        match tag {
            b't' => FieldValue::Bool(self.octet() != 0),
            b'b' => FieldValue::I8(i8::from_be_bytes([self.octet()])),
            b'B' => FieldValue::U8(self.octet()),
            b's' => FieldValue::I16(i16::from_be_bytes(self.short().to_be_bytes())),
            b'u' => FieldValue::U16(self.short()),
            b'I' => FieldValue::I32(i32::from_be_bytes(self.long().to_be_bytes())),
            b'i' => FieldValue::U32(self.long()),
            b'l' => FieldValue::I64(i64::from_be_bytes(self.longlong().to_be_bytes())),
            b'f' => FieldValue::F32(f32::from_bits(self.long())),
            b'd' => FieldValue::F64(f64::from_bits(self.longlong())),
            b'D' => {
                let scale = self.octet();
                FieldValue::Decimal(scale, self.long())
            }
            b'S' => FieldValue::LongStr(self.longstr()),
            b'A' => FieldValue::Array(self.array()),
            b'T' => FieldValue::Timestamp(self.longlong()),
            b'F' => FieldValue::Table(self.table()),
            b'V' => FieldValue::Void,
            b'x' => FieldValue::Bytes(self.longstr()),
            other => panic!(
                "broker sent unknown field type {other:#04x} at {}",
                self.offset
            ),
        }
    }
}

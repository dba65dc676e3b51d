//! Publish frames written straight into the write buffer, with no allocation per message:
//! warren-proto's `PublishCommand::Publish` wants one `Bytes` per message, which at millions
//! of messages a second is the cost this tool must not have. The bytes are the spec's (a
//! unit test decodes them with warren-proto's `decode_command`):
//!
//! ```text
//! Publish => Size Key(0x0002) Version(1) PublisherId:u8 Count:u32 Entry*Count
//! simple entry    => PublishingId:u64 Length:i32 Message
//! sub-entry batch => PublishingId:u64 0x80 (type 1, compression 0) Records:u16
//!                    UncompressedLength:u32 Length:u32 (RecordLength:u32 Message)*Records
//! Message         => an AMQP 1.0 message with one data section: 00 53 75, then vbin8
//!                    (a0 LEN:u8) or vbin32 (b0 LEN:u32), then the body
//! ```
//!
//! The body starts with the latency stamp (`body::Stamp`); the rest is zeros. A sub-entry
//! batch takes one publishing id for all its messages, as RabbitMQ's clients send them.

use bytes::{BufMut, BytesMut};
use warren_proto::stream::key;

use crate::body::Stamp;
use crate::error::PerfError;

/// Size prefix, key, version, publisher id and entry count.
const FRAME_HEAD_BYTES: usize = 4 + 2 + 2 + 1 + 4;
/// A simple entry's publishing id and length.
const SIMPLE_HEAD_BYTES: usize = 8 + 4;
/// A sub-entry batch's publishing id, type byte, record count and two lengths.
const SUB_ENTRY_HEAD_BYTES: usize = 8 + 1 + 2 + 4 + 4;
/// The sub-entry type byte: entry type 1 (top bit), compression 0 (none).
const SUB_ENTRY_UNCOMPRESSED: u8 = 0x80;

/// One message's bytes with a zero body, written per message with its stamp patched in.
#[derive(Clone, Debug)]
pub struct MessageTemplate {
    bytes: Vec<u8>,
    /// Where the body starts in `bytes`.
    body_at: usize,
}

impl MessageTemplate {
    /// An AMQP 1.0 message whose one data section holds `body_size` bytes.
    pub fn new(body_size: usize) -> MessageTemplate {
        let mut bytes = vec![0x00, 0x53, 0x75];
        match u8::try_from(body_size) {
            Ok(len) => bytes.extend_from_slice(&[0xa0, len]),
            Err(_) => {
                bytes.push(0xb0);
                let len = u32::try_from(body_size).unwrap_or(u32::MAX);
                bytes.extend_from_slice(&len.to_be_bytes());
            }
        }
        let body_at = bytes.len();
        bytes.resize(body_at + body_size, 0);
        MessageTemplate { bytes, body_at }
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Appends the message with `stamp` in its body.
    fn write(&self, out: &mut BytesMut, stamp: &Stamp) {
        let start = out.len() + self.body_at;
        out.extend_from_slice(&self.bytes);
        if let Some(body) = out.get_mut(start..) {
            stamp.write(body);
        }
    }
}

/// The shape of every publish frame of a producer: entries per frame, messages per entry.
#[derive(Clone, Debug)]
pub struct PublishPlan {
    pub publisher_id: u8,
    pub entries_per_frame: u32,
    /// 1: simple entries; more: uncompressed sub-entry batches of this many messages.
    pub sub_entry_size: u16,
    pub template: MessageTemplate,
    /// The producer's number, in each body of 16 bytes or more.
    pub producer: u32,
}

impl PublishPlan {
    /// Checks that a full frame fits the connection's `frame_max` (0: no limit).
    pub fn new(
        publisher_id: u8,
        entries_per_frame: u32,
        sub_entry_size: u16,
        body_size: usize,
        producer: u32,
        frame_max: u32,
    ) -> Result<PublishPlan, PerfError> {
        let plan = PublishPlan {
            publisher_id,
            entries_per_frame,
            sub_entry_size,
            template: MessageTemplate::new(body_size),
            producer,
        };
        let frame_bytes = plan.frame_bytes(entries_per_frame);
        if frame_max != 0 && frame_bytes > frame_max as usize + 4 {
            return Err(PerfError::usage(format!(
                "a publish frame of {entries_per_frame} entries of {sub_entry_size} message(s) \
                 of {body_size} bytes takes {frame_bytes} bytes, more than the broker's \
                 frame_max {frame_max}; lower --batch-size or --sub-entry-size"
            )));
        }
        Ok(plan)
    }

    /// Messages in one entry.
    pub fn messages_per_entry(&self) -> u32 {
        u32::from(self.sub_entry_size)
    }

    fn entry_bytes(&self) -> usize {
        if self.sub_entry_size <= 1 {
            SIMPLE_HEAD_BYTES + self.template.len()
        } else {
            SUB_ENTRY_HEAD_BYTES + usize::from(self.sub_entry_size) * (4 + self.template.len())
        }
    }

    /// Bytes of a frame of `entries`, size prefix included.
    pub fn frame_bytes(&self, entries: u32) -> usize {
        FRAME_HEAD_BYTES + entries as usize * self.entry_bytes()
    }

    /// Appends one publish frame of `entries` entries with publishing ids from `first_id`;
    /// every body's stamp has `sent_ns` and the next of `sequence`. Returns the messages.
    pub fn write_frame(
        &self,
        out: &mut BytesMut,
        entries: u32,
        first_id: u64,
        sent_ns: u64,
        sequence: &mut u32,
    ) -> u32 {
        debug_assert!(entries > 0, "invariant: a publish frame has entries");
        let start = out.len();
        let frame_bytes = self.frame_bytes(entries);
        out.reserve(frame_bytes);
        out.put_u32((frame_bytes - 4) as u32);
        out.put_u16(key::PUBLISH);
        out.put_u16(1);
        out.put_u8(self.publisher_id);
        out.put_u32(entries);
        let mut stamp = Stamp {
            sequence: *sequence,
            sent_ns,
            producer: self.producer,
        };
        for id in first_id..first_id + u64::from(entries) {
            out.put_u64(id);
            if self.sub_entry_size <= 1 {
                out.put_u32(self.template.len() as u32);
                self.template.write(out, &stamp);
                stamp.sequence = stamp.sequence.wrapping_add(1);
                continue;
            }
            let data_len = usize::from(self.sub_entry_size) * (4 + self.template.len());
            out.put_u8(SUB_ENTRY_UNCOMPRESSED);
            out.put_u16(self.sub_entry_size);
            out.put_u32(data_len as u32);
            out.put_u32(data_len as u32);
            for _ in 0..self.sub_entry_size {
                out.put_u32(self.template.len() as u32);
                self.template.write(out, &stamp);
                stamp.sequence = stamp.sequence.wrapping_add(1);
            }
        }
        debug_assert_eq!(
            out.len() - start,
            frame_bytes,
            "invariant: frame_bytes is exact"
        );
        *sequence = stamp.sequence;
        entries * self.messages_per_entry()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use warren_proto::stream::{decode_command, decode_frame, Command, PublishCommand};

    use super::*;
    use crate::stream::chunk::stamp_of_message;

    #[test]
    fn simple_entries_decode_with_warren_proto() {
        let plan = PublishPlan::new(7, 3, 1, 12, 0, 1_048_576).unwrap();
        let mut out = BytesMut::new();
        let mut sequence = 40;
        assert_eq!(plan.write_frame(&mut out, 3, 100, 555, &mut sequence), 3);
        assert_eq!(sequence, 43);
        assert_eq!(out.len(), plan.frame_bytes(3));
        let frame = decode_frame(&mut out, 0).unwrap().unwrap();
        assert!(out.is_empty());
        let Command::Publish(PublishCommand::Publish {
            publisher_id,
            filtered,
            messages,
        }) = decode_command(&frame).unwrap()
        else {
            panic!("not a publish");
        };
        assert_eq!((publisher_id, filtered, messages.len()), (7, false, 3));
        for (i, message) in messages.iter().enumerate() {
            assert_eq!(message.publishing_id, 100 + i as u64);
            assert_eq!(&message.message[..5], &[0x00, 0x53, 0x75, 0xa0, 12]);
            let stamp = stamp_of_message(&message.message).unwrap();
            assert_eq!((stamp.sequence, stamp.sent_ns), (40 + i as u32, 555));
        }
    }

    #[test]
    fn sub_entries_follow_the_spec_layout() {
        let plan = PublishPlan::new(1, 2, 3, 16, 9, 0).unwrap();
        let mut out = BytesMut::new();
        let mut sequence = 0;
        assert_eq!(plan.write_frame(&mut out, 2, 5, 77, &mut sequence), 6);
        let frame = decode_frame(&mut out, 0).unwrap().unwrap();
        let body: Bytes = frame.body;
        assert_eq!((frame.key, frame.version), (key::PUBLISH, 1));
        assert_eq!(&body[..5], &[1, 0, 0, 0, 2]);
        let record = 4 + 5 + 16;
        let entry = &body[5..5 + 8 + 11 + 3 * record];
        assert_eq!(&entry[..8], &5u64.to_be_bytes());
        assert_eq!(entry[8], 0x80);
        assert_eq!(&entry[9..11], &3u16.to_be_bytes());
        assert_eq!(&entry[11..15], &(3 * record as u32).to_be_bytes());
        assert_eq!(&entry[15..19], &(3 * record as u32).to_be_bytes());
        let second = &entry[19 + record..19 + 2 * record];
        assert_eq!(&second[..4], &(21u32).to_be_bytes());
        let stamp = stamp_of_message(&second[4..]).unwrap();
        assert_eq!((stamp.sequence, stamp.sent_ns, stamp.producer), (1, 77, 9));
        assert_eq!(body.len(), 5 + 2 * (19 + 3 * record));
    }

    #[test]
    fn large_bodies_use_vbin32_and_frames_respect_frame_max() {
        let template = MessageTemplate::new(1000);
        assert_eq!(
            &template.bytes[..8],
            &[0x00, 0x53, 0x75, 0xb0, 0, 0, 3, 0xe8]
        );
        let error = PublishPlan::new(0, 100, 1, 100_000, 0, 1_048_576).unwrap_err();
        assert!(error.to_string().contains("lower --batch-size"), "{error}");
    }
}

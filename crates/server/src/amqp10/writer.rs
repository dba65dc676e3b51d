//! Outgoing frames of one AMQP 1.0 connection, written once per turn. Small frames are encoded
//! into one buffer; a large message body joins the write list as its own `Bytes` (a slice of
//! the publisher's read buffer), not copied.

use std::io::IoSlice;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::AsyncWriteExt;
use warren_proto::amqp10::frame::{
    encode_empty_frame, encode_frame, encode_frame_head, encode_sasl_frame, frame_head_len,
};
use warren_proto::amqp10::{Performative, SaslFrame, Transfer};

use warren_core::message::Body;

use crate::encode_buffer::Keeper;

/// Buffers handed to one `writev`.
const IOVECS_MAX: usize = 512;
/// Bodies at least this large are written from their own buffer instead of being copied.
const ZERO_COPY_BYTES_MIN: usize = 4096;

#[derive(Default)]
pub struct Writer {
    encode: BytesMut,
    queued: Vec<Bytes>,
    /// Whether `encode` is kept between flushes.
    keeper: Keeper,
}

impl Writer {
    pub fn raw(&mut self, bytes: &[u8]) {
        self.encode.extend_from_slice(bytes);
    }

    pub fn frame(&mut self, channel: u16, performative: &Performative) {
        encode_frame(&mut self.encode, channel, performative, &[]);
    }

    pub fn sasl(&mut self, frame: &SaslFrame) {
        encode_sasl_frame(&mut self.encode, frame);
    }

    pub fn empty(&mut self) {
        encode_empty_frame(&mut self.encode);
    }

    pub fn is_empty(&self) -> bool {
        self.encode.is_empty() && self.queued.is_empty()
    }

    /// Writes a delivery as one or more transfer frames of at most `max_frame_size` bytes:
    /// `prefix` (the message's sections up to the body's bytes) then `body`. The first frame
    /// carries `first`; continuations carry only the handle and `more`. Returns the number of
    /// frames (each takes a transfer-id).
    pub fn transfer(
        &mut self,
        channel: u16,
        first: Transfer,
        prefix: &[u8],
        body: &Body,
        max_frame_size: u32,
    ) -> u32 {
        let total = prefix.len() + body.len();
        let handle = first.handle;
        // The common case, a delivery in one frame: the head is encoded once, with `more`
        // false, and kept when the whole delivery fits in the frame.
        let start = self.encode.len();
        let single = Performative::Transfer(Transfer {
            more: false,
            ..first
        });
        encode_frame_head(&mut self.encode, channel, &single, total);
        if self.encode.len() - start + total <= max_frame_size as usize {
            self.payload(prefix, body, 0, total);
            return 1;
        }
        self.encode.truncate(start);
        let Performative::Transfer(mut transfer) = single else {
            unreachable!("invariant: built as a transfer just above");
        };
        let mut sent = 0usize;
        let mut frames = 0u32;
        loop {
            frames += 1;
            transfer.more = true;
            let head = frame_head_len(&Performative::Transfer(transfer.clone()));
            let room = (max_frame_size as usize).saturating_sub(head).max(1);
            let chunk = room.min(total - sent);
            transfer.more = sent + chunk < total;
            let performative = Performative::Transfer(transfer);
            encode_frame_head(&mut self.encode, channel, &performative, chunk);
            self.payload(prefix, body, sent, chunk);
            sent += chunk;
            if sent >= total {
                return frames;
            }
            transfer = Transfer {
                handle,
                ..Transfer::default()
            };
        }
    }

    /// Appends bytes `from..from + len` of `prefix ++ body`.
    fn payload(&mut self, prefix: &[u8], body: &Body, from: usize, len: usize) {
        let end = from + len;
        if from < prefix.len() {
            let upto = end.min(prefix.len());
            self.encode
                .extend_from_slice(prefix.get(from..upto).unwrap_or_default());
        }
        if end > prefix.len() {
            let start = from.saturating_sub(prefix.len());
            let stop = end - prefix.len();
            if stop - start >= ZERO_COPY_BYTES_MIN {
                let encoded = self.encode.split().freeze();
                if !encoded.is_empty() {
                    self.queued.push(encoded);
                }
                body.for_each_slice(start..stop, |slice| self.queued.push(slice));
            } else {
                // Copied: cheaper than a handle on the body for a few bytes.
                body.copy_range_to(start..stop, &mut self.encode);
            }
        }
    }

    pub async fn flush(&mut self, socket: &mut crate::socket::SocketWriter) -> std::io::Result<()> {
        if !self.encode.is_empty() {
            let encoded = self.encode.split().freeze();
            self.queued.push(encoded);
        }
        let written = write_all_vectored(socket, &mut self.queued).await?;
        // A TLS socket may hold records back until flushed (plain TCP: nothing to do).
        socket.flush().await?;
        self.keeper.after_flush(&mut self.encode, written);
        Ok(())
    }
}

/// Writes `parts` in order with as few `writev` calls as the socket allows, and empties it;
/// returns the bytes written.
async fn write_all_vectored(
    socket: &mut crate::socket::SocketWriter,
    parts: &mut Vec<Bytes>,
) -> std::io::Result<usize> {
    let mut total = 0;
    let mut done = 0; // parts written whole
    while done < parts.len() {
        let slices: Vec<IoSlice<'_>> = parts
            .iter()
            .skip(done)
            .take(IOVECS_MAX)
            .map(|part| IoSlice::new(part))
            .collect();
        let mut written = socket.write_vectored(&slices).await?;
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        total += written;
        while written > 0 {
            let Some(part) = parts.get_mut(done) else {
                break;
            };
            if part.len() <= written {
                written -= part.len();
                done += 1;
            } else {
                part.advance(written);
                written = 0;
            }
        }
    }
    parts.clear();
    Ok(total)
}

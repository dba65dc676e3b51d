//! Outgoing frames of one AMQP 1.0 connection, written once per turn (see
//! `connection::output`, which both protocols share): a large message body joins the write
//! list as its own slices (of the publisher's read buffers), not copied.

use warren_proto::amqp10::frame::{
    encode_empty_frame, encode_frame, encode_frame_head, encode_sasl_frame, frame_head_len,
};
use warren_proto::amqp10::{Performative, SaslFrame, Transfer};

use warren_core::message::Body;

use crate::connection::output::{Output, ZERO_COPY_BYTES_MIN};

/// AMQP 1.0 frames on the shared output.
#[derive(Default)]
pub struct Writer {
    out: Output,
}

impl Writer {
    pub fn raw(&mut self, bytes: &[u8]) {
        self.out.encode().extend_from_slice(bytes);
    }

    pub fn frame(&mut self, channel: u16, performative: &Performative) {
        encode_frame(self.out.encode(), channel, performative, &[]);
    }

    pub fn sasl(&mut self, frame: &SaslFrame) {
        encode_sasl_frame(self.out.encode(), frame);
    }

    pub fn empty(&mut self) {
        encode_empty_frame(self.out.encode());
    }

    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
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
        let encode = self.out.encode();
        let start = encode.len();
        let single = Performative::Transfer(Transfer {
            more: false,
            ..first
        });
        encode_frame_head(encode, channel, &single, total);
        if encode.len() - start + total <= max_frame_size as usize {
            self.payload(prefix, body, 0, total);
            return 1;
        }
        encode.truncate(start);
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
            encode_frame_head(self.out.encode(), channel, &performative, chunk);
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
            self.out
                .encode()
                .extend_from_slice(prefix.get(from..upto).unwrap_or_default());
        }
        if end > prefix.len() {
            let start = from.saturating_sub(prefix.len());
            let stop = end - prefix.len();
            if stop - start >= ZERO_COPY_BYTES_MIN {
                self.out.push_body(body, start..stop);
            } else {
                // Copied: cheaper than a handle on the body for a few bytes.
                body.copy_range_to(start..stop, self.out.encode());
            }
        }
    }

    /// Writes everything queued (see `Output::flush`); returns the bytes written and the
    /// write calls it took.
    pub async fn flush(
        &mut self,
        socket: &mut crate::socket::SocketWriter,
    ) -> std::io::Result<(u64, u64)> {
        self.out.flush(socket).await
    }
}

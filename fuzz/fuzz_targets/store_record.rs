//! Feeds arbitrary bytes to the message store's record decoder (what recovery reads from a
//! segment file after a crash, torn writes and flipped bits included) and the stored-message
//! decoder behind it: neither may panic, and every record that decodes must stay inside the
//! buffer.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use warren_core::message::Message;
use warren_store::{decode_record, Record};

fuzz_target!(|data: &[u8]| {
    let mut at = 0;
    while at < data.len() {
        match decode_record(data, at) {
            Ok((record, len)) => {
                assert!(len > 0 && at + len <= data.len());
                if let Record::Enqueue { message, .. } = record {
                    let bytes = Bytes::copy_from_slice(&data[message]);
                    let _ = Message::decode_stored(bytes);
                }
                at += len;
            }
            Err(_) => at += 1,
        }
    }
});

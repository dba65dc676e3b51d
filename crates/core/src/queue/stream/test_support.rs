//! What the stream writer's tests share: a record encoding that is the message body, and a
//! stream queue started on a given storage.

use std::sync::{Arc, Weak};

use bytes::Bytes;

use super::*;
use crate::message::Message;
use crate::value::Table;

/// Records are message bodies; a record reads back as a message with that body.
#[derive(Debug)]
pub(super) struct BodyEncoding;

impl StreamEncoding for BodyEncoding {
    fn encode(&self, message: &Message) -> Bytes {
        message.body.to_bytes()
    }

    fn decode(&self, _offset: u64, record: Bytes) -> Result<Message, String> {
        Ok(Message::new(
            Bytes::new(),
            Bytes::new(),
            Bytes::new(),
            record,
        ))
    }
}

/// Starts the stream `name` in vhost `/` on `storage`; `restart` recovers what is there.
pub(super) fn start_stream(name: &str, storage: StreamStorage, restart: bool) -> QueueHandle {
    let def = QueueDef {
        name: Arc::from(name),
        vhost: Arc::from("/"),
        durable: true,
        exclusive_owner: None,
        auto_delete: false,
        arguments: Table::new(),
    };
    let setup = Setup {
        args: QueueArgs::default(),
        on_auto_delete: Box::new(|| {}),
        storage: None,
        recovered: None,
        vhost: Weak::new(),
        credit: 100,
        streams: Some(storage),
        restart,
    };
    spawn(def, setup)
}

//! Writes the seed corpus of the `amqp091_frame` fuzz target: streams of valid frames, each
//! preceded by the target's two selector bytes (split point, frame_max).
//!
//! `cargo run -p warren-proto --example amqp091_fuzz_seeds [DIR]`; DIR defaults to
//! `fuzz/seeds/amqp091_frame` at the repository root.

use std::path::PathBuf;

use bytes::{Bytes, BytesMut};
use warren_proto::amqp091::*;

fn main() -> std::io::Result<()> {
    let dir = match std::env::args_os().nth(1) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/amqp091_frame"),
    };
    std::fs::create_dir_all(&dir)?;
    for (name, split, frames) in seeds() {
        let mut data = vec![split, 1];
        data.extend_from_slice(&frames);
        std::fs::write(dir.join(name), data)?;
    }
    Ok(())
}

fn seeds() -> Vec<(&'static str, u8, BytesMut)> {
    vec![
        ("handshake", 100, handshake()),
        ("publish", 128, publish()),
        ("deliver_ack", 200, deliver_ack()),
        ("queue_declare", 60, queue_declare()),
        ("heartbeat", 0, heartbeats()),
    ]
}

fn peer_properties() -> FieldTable {
    let mut capabilities = FieldTable::default();
    capabilities.insert("publisher_confirms", FieldValue::Bool(true));
    capabilities.insert("consumer_cancel_notify", FieldValue::Bool(true));
    let mut table = FieldTable::default();
    table.insert(
        "product",
        FieldValue::LongStr(Bytes::from_static(b"warren")),
    );
    table.insert("capabilities", FieldValue::Table(capabilities));
    table
}

fn handshake() -> BytesMut {
    let mut out = BytesMut::new();
    let methods: Vec<Method> = vec![
        ConnectionStart {
            version_major: 0,
            version_minor: 9,
            server_properties: peer_properties(),
            mechanisms: Bytes::from_static(b"PLAIN AMQPLAIN"),
            locales: Bytes::from_static(b"en_US"),
        }
        .into(),
        ConnectionStartOk {
            client_properties: peer_properties(),
            mechanism: ShortStr::from_static("PLAIN"),
            response: Bytes::from_static(b"\0guest\0guest"),
            locale: ShortStr::from_static("en_US"),
        }
        .into(),
        ConnectionTune {
            channel_max: 2047,
            frame_max: 131_072,
            heartbeat: 60,
        }
        .into(),
        ConnectionTuneOk {
            channel_max: 2047,
            frame_max: 131_072,
            heartbeat: 60,
        }
        .into(),
        ConnectionOpen {
            virtual_host: ShortStr::from_static("/"),
            ..Default::default()
        }
        .into(),
        ConnectionOpenOk::default().into(),
    ];
    methods
        .iter()
        .for_each(|m| encode_method_frame(0, m, &mut out));
    encode_method_frame(1, &ChannelOpen::default().into(), &mut out);
    out
}

fn publish() -> BytesMut {
    let mut out = BytesMut::new();
    let publish = BasicPublish {
        exchange: ShortStr::from_static("amq.topic"),
        routing_key: ShortStr::from_static("orders.eu"),
        mandatory: true,
        ..Default::default()
    };
    encode_method_frame(1, &publish.into(), &mut out);
    let mut headers = FieldTable::default();
    headers.insert("x-retries", FieldValue::I32(3));
    headers.insert(
        "x-tags",
        FieldValue::Array(vec![FieldValue::LongStr(Bytes::from_static(b"a"))]),
    );
    let properties = BasicProperties {
        content_type: Some(ShortStr::from_static("application/json")),
        headers: Some(headers),
        delivery_mode: Some(2),
        priority: Some(5),
        message_id: Some(ShortStr::from_static("m-1")),
        timestamp: Some(1_700_000_000),
        ..Default::default()
    };
    let mut raw = BytesMut::new();
    properties.encode(&mut raw);
    encode_content_header(1, 60, 11, &raw, &mut out);
    encode_body_frame(1, b"{\"id\":", &mut out);
    encode_body_frame(1, b"42}\n", &mut out);
    out
}

fn deliver_ack() -> BytesMut {
    let mut out = BytesMut::new();
    let deliver = BasicDeliver {
        consumer_tag: ShortStr::from_static("ctag-1"),
        delivery_tag: 1,
        redelivered: false,
        exchange: ShortStr::from_static(""),
        routing_key: ShortStr::from_static("q"),
    };
    encode_method_frame(3, &deliver.into(), &mut out);
    encode_content_header(3, 60, 0, &[0, 0], &mut out);
    encode_method_frame(
        3,
        &BasicAck {
            delivery_tag: 1,
            multiple: true,
        }
        .into(),
        &mut out,
    );
    let nack = BasicNack {
        delivery_tag: 2,
        multiple: false,
        requeue: true,
    };
    encode_method_frame(3, &nack.into(), &mut out);
    out
}

fn queue_declare() -> BytesMut {
    let mut out = BytesMut::new();
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-queue-type",
        FieldValue::LongStr(Bytes::from_static(b"quorum")),
    );
    arguments.insert("x-max-length", FieldValue::I64(10_000));
    arguments.insert("x-message-ttl", FieldValue::U32(60_000));
    arguments.insert("x-expires", FieldValue::Decimal { scale: 1, value: 5 });
    let declare = QueueDeclare {
        queue: ShortStr::from_static("orders"),
        durable: true,
        arguments,
        ..Default::default()
    };
    encode_method_frame(2, &declare.into(), &mut out);
    let close = ChannelClose {
        reply_code: reply_code::PRECONDITION_FAILED,
        reply_text: ShortStr::from("PRECONDITION_FAILED - inequivalent arg 'x-max-length'"),
        class_id: 50,
        method_id: 10,
    };
    encode_method_frame(2, &close.into(), &mut out);
    out
}

fn heartbeats() -> BytesMut {
    let mut out = BytesMut::new();
    encode_heartbeat(&mut out);
    encode_heartbeat(&mut out);
    out
}

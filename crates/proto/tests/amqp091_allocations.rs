//! The hot path does not allocate: decoding basic.publish + content header + body, and encoding
//! basic.deliver + content header + body + basic.ack into buffers with room, count zero heap
//! allocations once the read buffer is shared (its first `split_to` allocates the shared handle).

use allocation_counter::measure;
use bytes::BytesMut;
use warren_proto::amqp091::*;

fn publish_stream(messages: usize) -> BytesMut {
    let mut out = BytesMut::new();
    let publish: Method = BasicPublish {
        exchange: ShortStr::from_static("amq.topic"),
        routing_key: ShortStr::from_static("orders.eu.created"),
        ..Default::default()
    }
    .into();
    let mut raw = BytesMut::new();
    BasicProperties {
        delivery_mode: Some(2),
        ..Default::default()
    }
    .encode(&mut raw);
    for _ in 0..messages {
        encode_method_frame(1, &publish, &mut out);
        encode_content_header(1, 60, 5, &raw, &mut out);
        encode_body_frame(1, b"hello", &mut out);
    }
    out
}

#[test]
fn the_counter_counts() {
    let info = measure(|| drop(std::hint::black_box(Vec::<u8>::with_capacity(8))));
    assert_eq!(info.count_total, 1);
}

#[test]
fn decoding_publishes_does_not_allocate() {
    let mut buf = publish_stream(101);
    let mut frames = 0;
    // Warm up: the first split promotes the buffer to a shared one.
    assert!(matches!(decode_frame(&mut buf, 131_072), Ok(Some(_))));
    let info = measure(|| {
        while let Ok(Some(frame)) = decode_frame(&mut buf, 131_072) {
            if let Frame::Header { header, .. } = &frame {
                assert_eq!(peek_delivery_mode(&header.properties), Some(2));
            }
            if let Frame::Method {
                method: Method::BasicPublish(p),
                ..
            } = &frame
            {
                assert_eq!(p.routing_key.as_str(), "orders.eu.created");
            }
            frames += 1;
        }
    });
    assert_eq!(frames, 302);
    assert_eq!(info.count_total, 0, "allocations while decoding: {info:?}");
}

#[test]
fn encoding_deliveries_does_not_allocate() {
    let deliver: Method = BasicDeliver {
        consumer_tag: ShortStr::from_static("amq.ctag-1"),
        delivery_tag: 1,
        redelivered: false,
        exchange: ShortStr::from_static("amq.topic"),
        routing_key: ShortStr::from_static("orders.eu.created"),
    }
    .into();
    let ack: Method = BasicAck {
        delivery_tag: 1,
        multiple: false,
    }
    .into();
    let raw = [0x10, 0x00, 2];
    let mut out = BytesMut::with_capacity(64 * 1024);
    let info = measure(|| {
        for _ in 0..100 {
            encode_method_frame(1, &deliver, &mut out);
            encode_content_header(1, 60, 5, &raw, &mut out);
            encode_body_frame(1, b"hello", &mut out);
            encode_method_frame(1, &ack, &mut out);
        }
    });
    assert!(out.len() < 64 * 1024);
    assert_eq!(info.count_total, 0, "allocations while encoding: {info:?}");
}

//! Property tests: generated publish, subscribe and metadata commands round-trip, and
//! arbitrary bytes behind any key and version decode to a command or a typed error, never a
//! panic (the fuzz target's check, run on every `cargo test`).

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;

use super::*;

fn round_trip(command: &Command) -> Result<(), TestCaseError> {
    let mut buf = BytesMut::new();
    command.encode(&mut buf).unwrap();
    let frame = decode_frame(&mut buf, 0).unwrap().unwrap();
    prop_assert!(buf.is_empty());
    prop_assert_eq!(&decode_command(&frame).unwrap(), command);
    Ok(())
}

fn offset_spec() -> impl Strategy<Value = OffsetSpec> {
    prop_oneof![
        Just(OffsetSpec::First),
        Just(OffsetSpec::Last),
        Just(OffsetSpec::Next),
        any::<u64>().prop_map(OffsetSpec::Offset),
        any::<i64>().prop_map(OffsetSpec::Timestamp),
    ]
}

fn published_message(filtered: bool) -> impl Strategy<Value = PublishedMessage> {
    let filter = if filtered {
        proptest::option::of(".{0,8}").boxed()
    } else {
        Just(None).boxed()
    };
    (
        any::<u64>(),
        filter,
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(publishing_id, filter_value, message)| PublishedMessage {
            publishing_id,
            filter_value,
            message: Bytes::from(message),
            sub_batch: None,
        })
}

fn publish() -> impl Strategy<Value = Command> {
    any::<bool>().prop_flat_map(|filtered| {
        let messages = proptest::collection::vec(published_message(filtered), 0..8);
        (any::<u8>(), messages).prop_map(move |(publisher_id, messages)| {
            Command::Publish(PublishCommand::Publish {
                publisher_id,
                filtered,
                messages,
            })
        })
    })
}

fn properties() -> impl Strategy<Value = Properties> {
    proptest::collection::vec((".{0,12}", ".{0,12}"), 0..4)
}

fn subscribe() -> impl Strategy<Value = Command> {
    (
        any::<u32>(),
        any::<u8>(),
        ".{0,20}",
        offset_spec(),
        any::<u16>(),
        properties(),
    )
        .prop_map(
            |(correlation_id, subscription_id, stream, offset, credit, properties)| {
                Command::Subscribe(SubscribeCommand::Subscribe {
                    correlation_id,
                    subscription_id,
                    stream,
                    offset,
                    credit,
                    properties,
                })
            },
        )
}

fn metadata_response() -> impl Strategy<Value = Command> {
    let broker =
        (any::<u16>(), ".{0,12}", any::<u32>()).prop_map(|(reference, host, port)| Broker {
            reference,
            host,
            port,
        });
    let replicas = proptest::collection::vec(any::<u16>(), 0..4);
    let stream = (".{0,12}", any::<u16>(), any::<u16>(), replicas).prop_map(
        |(stream, code, leader, replicas)| StreamMetadata {
            stream,
            code,
            leader,
            replicas,
        },
    );
    (
        any::<u32>(),
        proptest::collection::vec(broker, 0..4),
        proptest::collection::vec(stream, 0..4),
    )
        .prop_map(|(correlation_id, brokers, streams)| {
            Command::Admin(AdminCommand::MetadataResponse {
                correlation_id,
                brokers,
                streams,
            })
        })
}

proptest! {
    #[test]
    fn generated_commands_round_trip(
        command in prop_oneof![publish(), subscribe(), metadata_response()]
    ) {
        round_trip(&command)?;
    }

    #[test]
    fn arbitrary_bodies_never_panic(
        raw_key in prop_oneof![0u16..0x22, 0x8000u16..0x8022],
        version in 0u16..4,
        body in proptest::collection::vec(any::<u8>(), 0..96),
    ) {
        let mut buf = BytesMut::new();
        buf.put_u32(u32::try_from(body.len() + 4).unwrap());
        buf.put_u16(raw_key);
        buf.put_u16(version);
        buf.put_slice(&body);
        let frame = decode_frame(&mut buf, 0).unwrap().unwrap();
        if let Ok(command) = decode_command(&frame) {
            round_trip(&command)?;
        }
    }
}

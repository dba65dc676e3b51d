//! Round trips for every command (encode, then `decode_frame` and `decode_command`, equals the
//! original) and truncation of each one: a cut frame is `Ok(None)`, a frame whose size prefix
//! is rewritten to the cut length is a typed error, never a panic.

use bytes::{Bytes, BytesMut};

use super::*;

fn properties(pairs: &[(&str, &str)]) -> Properties {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn connection_samples() -> Vec<Command> {
    use ConnectionCommand as C;
    [
        C::PeerPropertiesRequest {
            correlation_id: 1,
            properties: properties(&[("product", "Warren"), ("version", "0.1")]),
        },
        C::PeerPropertiesResponse {
            correlation_id: 1,
            code: 1,
            properties: vec![],
        },
        C::SaslHandshakeRequest { correlation_id: 2 },
        C::SaslHandshakeResponse {
            correlation_id: 2,
            code: response_code::OK,
            mechanisms: vec!["PLAIN".into(), "AMQPLAIN".into()],
        },
        C::SaslAuthenticateRequest {
            correlation_id: 3,
            mechanism: "PLAIN".into(),
            data: Some(Bytes::from_static(b"\0guest\0guest")),
        },
        C::SaslAuthenticateRequest {
            correlation_id: 3,
            mechanism: "PLAIN".into(),
            data: None,
        },
        C::SaslAuthenticateResponse {
            correlation_id: 3,
            code: 1,
            data: None,
        },
        C::SaslAuthenticateResponse {
            correlation_id: 3,
            code: response_code::SASL_CHALLENGE,
            data: Some(Bytes::from_static(b"challenge")),
        },
    ]
    .into_iter()
    .map(Command::Connection)
    .collect()
}

fn session_samples() -> Vec<Command> {
    use ConnectionCommand as C;
    let versions = vec![CommandVersion {
        key: key::PUBLISH,
        min_version: 1,
        max_version: 2,
    }];
    [
        C::Tune {
            response: false,
            frame_max: 1_048_576,
            heartbeat: 60,
        },
        C::Tune {
            response: true,
            frame_max: 0,
            heartbeat: 0,
        },
        C::OpenRequest {
            correlation_id: 4,
            virtual_host: "/".into(),
        },
        C::OpenResponse {
            correlation_id: 4,
            code: 1,
            properties: properties(&[("advertised_host", "localhost")]),
        },
        C::CloseRequest {
            correlation_id: 5,
            code: 1,
            reason: Some("bye".into()),
        },
        C::CloseRequest {
            correlation_id: 5,
            code: 1,
            reason: None,
        },
        C::Heartbeat,
        C::ExchangeCommandVersionsRequest {
            correlation_id: 6,
            versions: versions.clone(),
        },
        C::ExchangeCommandVersionsResponse {
            correlation_id: 6,
            code: 1,
            versions,
        },
    ]
    .into_iter()
    .map(Command::Connection)
    .collect()
}

fn publish_samples() -> Vec<Command> {
    use PublishCommand as P;
    let message = |id, filter: Option<&str>| PublishedMessage {
        publishing_id: id,
        filter_value: filter.map(str::to_string),
        message: Bytes::from(format!("body {id}")),
        sub_batch: None,
    };
    [
        P::DeclarePublisher {
            correlation_id: 7,
            publisher_id: 3,
            reference: Some("ref".into()),
            stream: "orders".into(),
        },
        P::DeclarePublisher {
            correlation_id: 7,
            publisher_id: 3,
            reference: None,
            stream: "orders".into(),
        },
        P::Publish {
            publisher_id: 3,
            filtered: false,
            messages: vec![message(1, None), message(2, None)],
        },
        P::Publish {
            publisher_id: 3,
            filtered: true,
            messages: vec![message(3, Some("eu")), message(4, None)],
        },
        P::Publish {
            publisher_id: 0,
            filtered: false,
            messages: vec![],
        },
        P::PublishConfirm {
            publisher_id: 3,
            publishing_ids: vec![1, 2, u64::MAX],
        },
        P::PublishError {
            publisher_id: 3,
            errors: vec![(9, response_code::PUBLISHER_DOES_NOT_EXIST)],
        },
        P::QueryPublisherSequenceRequest {
            correlation_id: 8,
            reference: "ref".into(),
            stream: "orders".into(),
        },
        P::QueryPublisherSequenceResponse {
            correlation_id: 8,
            code: 1,
            sequence: 42,
        },
        P::DeletePublisher {
            correlation_id: 9,
            publisher_id: 3,
        },
    ]
    .into_iter()
    .map(Command::Publish)
    .collect()
}

fn subscribe_samples() -> Vec<Command> {
    use SubscribeCommand as S;
    let specs = [
        OffsetSpec::First,
        OffsetSpec::Last,
        OffsetSpec::Next,
        OffsetSpec::Offset(1234),
        OffsetSpec::Timestamp(-5),
    ];
    let mut samples: Vec<S> = specs
        .iter()
        .map(|offset| S::Subscribe {
            correlation_id: 10,
            subscription_id: 1,
            stream: "orders".into(),
            offset: *offset,
            credit: 10,
            properties: properties(&[("filter.0", "eu"), ("match-unfiltered", "true")]),
        })
        .collect();
    samples.extend([
        S::Deliver {
            subscription_id: 1,
            committed_chunk_id: None,
            chunk: Bytes::from_static(b"osiris chunk bytes"),
        },
        S::Deliver {
            subscription_id: 1,
            committed_chunk_id: Some(77),
            chunk: Bytes::new(),
        },
        S::Credit {
            subscription_id: 1,
            credit: 5,
        },
        S::CreditResponse {
            code: response_code::SUBSCRIPTION_ID_DOES_NOT_EXIST,
            subscription_id: 9,
        },
        S::StoreOffset {
            reference: "app".into(),
            stream: "orders".into(),
            offset: 99,
        },
        S::QueryOffsetRequest {
            correlation_id: 11,
            reference: "app".into(),
            stream: "orders".into(),
        },
        S::QueryOffsetResponse {
            correlation_id: 11,
            code: response_code::NO_OFFSET,
            offset: 0,
        },
        S::Unsubscribe {
            correlation_id: 12,
            subscription_id: 1,
        },
        S::ResolveOffsetSpecRequest {
            correlation_id: 13,
            stream: "orders".into(),
            offset: OffsetSpec::Timestamp(1_700_000_000_000),
            properties: vec![],
        },
        S::ResolveOffsetSpecResponse {
            correlation_id: 13,
            code: 1,
            offset: OffsetSpec::Offset(8),
        },
    ]);
    samples.into_iter().map(Command::Subscribe).collect()
}

fn admin_samples() -> Vec<Command> {
    use AdminCommand as A;
    [
        A::Create {
            correlation_id: 14,
            stream: "orders".into(),
            arguments: properties(&[("max-length-bytes", "1000000")]),
        },
        A::Delete {
            correlation_id: 15,
            stream: "orders".into(),
        },
        A::MetadataRequest {
            correlation_id: 16,
            streams: vec!["a".into(), "b".into()],
        },
        A::MetadataRequest {
            correlation_id: 16,
            streams: vec![],
        },
        A::MetadataResponse {
            correlation_id: 16,
            brokers: vec![Broker {
                reference: 0,
                host: "localhost".into(),
                port: 5552,
            }],
            streams: vec![
                StreamMetadata {
                    stream: "a".into(),
                    code: 1,
                    leader: 0,
                    replicas: vec![1, 2],
                },
                StreamMetadata {
                    stream: "b".into(),
                    code: response_code::STREAM_DOES_NOT_EXIST,
                    leader: 0,
                    replicas: vec![],
                },
            ],
        },
        A::MetadataResponse {
            correlation_id: 16,
            brokers: vec![],
            streams: vec![],
        },
        A::MetadataUpdate {
            code: response_code::STREAM_NOT_AVAILABLE,
            stream: "a".into(),
        },
        A::StreamStatsRequest {
            correlation_id: 17,
            stream: "a".into(),
        },
        A::StreamStatsResponse {
            correlation_id: 17,
            code: 1,
            stats: vec![
                ("first_chunk_id".into(), 0),
                ("committed_chunk_id".into(), -1),
            ],
        },
    ]
    .into_iter()
    .map(Command::Admin)
    .collect()
}

fn simple_response_samples() -> Vec<Command> {
    [
        key::DECLARE_PUBLISHER,
        key::DELETE_PUBLISHER,
        key::SUBSCRIBE,
        key::UNSUBSCRIBE,
        key::CREATE,
        key::DELETE,
        key::CLOSE,
    ]
    .into_iter()
    .map(|key| {
        Command::Response(SimpleResponse {
            key,
            correlation_id: 18,
            code: 1,
        })
    })
    .collect()
}

pub(super) fn all_samples() -> Vec<Command> {
    let mut samples = connection_samples();
    samples.extend(session_samples());
    samples.extend(publish_samples());
    samples.extend(subscribe_samples());
    samples.extend(admin_samples());
    samples.extend(simple_response_samples());
    samples
}

pub(super) fn encoded(command: &Command) -> BytesMut {
    let mut out = BytesMut::new();
    command.encode(&mut out).unwrap();
    out
}

#[test]
fn every_command_round_trips() {
    let samples = all_samples();
    let mut keys = std::collections::BTreeSet::new();
    for command in &samples {
        let mut buf = encoded(command);
        let frame = decode_frame(&mut buf, 0).unwrap().unwrap();
        assert!(buf.is_empty(), "{command:?} leaves {} bytes", buf.len());
        keys.insert((frame.key, frame.response));
        assert_eq!(decode_command(&frame).unwrap(), *command);
    }
    // Every (key, response bit) pair the codec defines has a sample here.
    assert_eq!(keys.len(), 45, "{keys:?}");
}

#[test]
fn back_to_back_frames_decode_in_order() {
    let samples = all_samples();
    let mut buf = BytesMut::new();
    samples
        .iter()
        .for_each(|command| command.encode(&mut buf).unwrap());
    for command in &samples {
        let frame = decode_frame(&mut buf, 0).unwrap().unwrap();
        assert_eq!(decode_command(&frame).unwrap(), *command);
    }
    assert!(buf.is_empty());
    assert_eq!(decode_frame(&mut buf, 0), Ok(None));
}

#[test]
fn every_cut_of_every_frame_is_incomplete() {
    for command in all_samples() {
        let whole = encoded(&command);
        for cut in 0..whole.len() {
            let mut buf = BytesMut::from(whole.get(..cut).unwrap());
            assert_eq!(
                decode_frame(&mut buf, 0),
                Ok(None),
                "{command:?} cut at {cut}"
            );
            assert_eq!(buf.as_ref(), whole.get(..cut).unwrap(), "buffer untouched");
        }
    }
}

#[test]
fn every_short_body_is_a_typed_error() {
    for command in all_samples() {
        let whole = encoded(&command);
        // Cut the body and rewrite the size prefix, so the frame is complete but short.
        for cut in SIZE_PREFIX_LEN + FRAME_HEADER_LEN..whole.len() {
            let mut buf = BytesMut::from(whole.get(..cut).unwrap());
            let size = u32::try_from(cut - SIZE_PREFIX_LEN).unwrap();
            buf.get_mut(..4)
                .unwrap()
                .copy_from_slice(&size.to_be_bytes());
            let frame = decode_frame(&mut buf, 0).unwrap().unwrap();
            match decode_command(&frame) {
                // A Deliver's chunk, an optional tail or an empty array can end anywhere.
                Ok(decoded) => assert!(
                    may_end_early(&command) || decoded == without_properties(&command),
                    "{command:?} cut at {cut} decoded"
                ),
                Err(e) => assert_eq!(e.response_code(), response_code::UNKNOWN_FRAME, "{e}"),
            }
        }
    }
}

/// The command as a client that leaves out its optional trailing properties sends it: Subscribe
/// and ResolveOffsetSpec cut right before their properties decode as that.
fn without_properties(command: &Command) -> Command {
    let mut command = command.clone();
    if let Command::Subscribe(
        SubscribeCommand::Subscribe { properties, .. }
        | SubscribeCommand::ResolveOffsetSpecRequest { properties, .. },
    ) = &mut command
    {
        properties.clear();
    }
    command
}

/// The bytes an unnamed consumer of the Java and Go clients sends: Subscribe without its
/// properties array. RabbitMQ reads the missing array as empty, and so must Warren.
#[test]
fn subscribe_without_properties_decodes_as_empty_properties() {
    let mut body = BytesMut::new();
    body.extend_from_slice(&key::SUBSCRIBE.to_be_bytes());
    body.extend_from_slice(&1u16.to_be_bytes()); // version
    body.extend_from_slice(&7u32.to_be_bytes()); // correlation id
    body.extend_from_slice(&[3]); // subscription id
    body.extend_from_slice(&6u16.to_be_bytes());
    body.extend_from_slice(b"orders");
    body.extend_from_slice(&1u16.to_be_bytes()); // offset type: first
    body.extend_from_slice(&10u16.to_be_bytes()); // credit
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&u32::try_from(body.len()).unwrap().to_be_bytes());
    buf.extend_from_slice(&body);
    let frame = decode_frame(&mut buf, 0).unwrap().unwrap();
    assert_eq!(
        decode_command(&frame),
        Ok(Command::Subscribe(SubscribeCommand::Subscribe {
            correlation_id: 7,
            subscription_id: 3,
            stream: "orders".into(),
            offset: OffsetSpec::First,
            credit: 10,
            properties: Vec::new(),
        }))
    );
}

fn may_end_early(command: &Command) -> bool {
    matches!(
        command,
        Command::Subscribe(SubscribeCommand::Deliver { .. })
            | Command::Connection(ConnectionCommand::SaslAuthenticateResponse { .. })
            | Command::Connection(ConnectionCommand::OpenResponse { .. })
    )
}

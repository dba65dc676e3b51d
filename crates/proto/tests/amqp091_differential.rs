//! Differential test against `amq-protocol` (the codec under lapin): frames we encode decode
//! with amq-protocol to the same values, frames it encodes decode with ours to the same values,
//! and both produce the same bytes.
//!
//! amq-protocol leaves out the reserved arguments (ticket, capabilities, insist, out-of-band,
//! known-hosts, channel-id) and writes them as zero/empty, so ours are left at their defaults.
//! Its field tables are sorted maps, so the generated tables have sorted, distinct keys.

use amq_protocol::frame::{gen_frame, parse_frame, AMQPContentHeader, AMQPFrame, WriteContext};
use amq_protocol::protocol::{basic, channel, confirm, connection, exchange, queue, AMQPClass};
use amq_protocol::types as theirs;
use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use warren_proto::amqp091::*;

// ---------------------------------------------------------------------------------------------
// Value strategies and conversions.

fn name() -> impl Strategy<Value = String> {
    prop_oneof![4 => ".{0,12}", 1 => "[a-z]{255}"]
}

fn blob() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..32)
}

fn leaf() -> impl Strategy<Value = FieldValue> {
    prop_oneof![
        any::<bool>().prop_map(FieldValue::Bool),
        any::<i8>().prop_map(FieldValue::I8),
        any::<u8>().prop_map(FieldValue::U8),
        any::<i16>().prop_map(FieldValue::I16),
        any::<u16>().prop_map(FieldValue::U16),
        any::<i32>().prop_map(FieldValue::I32),
        any::<u32>().prop_map(FieldValue::U32),
        any::<i64>().prop_map(FieldValue::I64),
        any::<f32>()
            .prop_filter("NaN", |f| !f.is_nan())
            .prop_map(FieldValue::F32),
        any::<f64>()
            .prop_filter("NaN", |f| !f.is_nan())
            .prop_map(FieldValue::F64),
        (any::<u8>(), any::<u32>()).prop_map(|(scale, value)| FieldValue::Decimal { scale, value }),
        blob().prop_map(|b| FieldValue::LongStr(b.into())),
        any::<u64>().prop_map(FieldValue::Timestamp),
        Just(FieldValue::Void),
        blob().prop_map(|b| FieldValue::Bytes(b.into())),
    ]
}

/// A table with sorted, distinct keys (as amq-protocol's `BTreeMap` writes it).
fn sorted_table(value: BoxedStrategy<FieldValue>) -> impl Strategy<Value = FieldTable> {
    prop::collection::btree_map(".{0,8}", value, 0..5).prop_map(|map| {
        map.into_iter()
            .map(|(k, v)| (ShortStr::from(k), v))
            .collect()
    })
}

fn value() -> BoxedStrategy<FieldValue> {
    leaf()
        .prop_recursive(3, 32, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(FieldValue::Array),
                sorted_table(inner).prop_map(FieldValue::Table),
            ]
        })
        .boxed()
}

fn table() -> impl Strategy<Value = FieldTable> {
    sorted_table(value())
}

fn their_value(v: &FieldValue) -> theirs::AMQPValue {
    use theirs::AMQPValue as T;
    match v {
        FieldValue::Bool(x) => T::Boolean(*x),
        FieldValue::I8(x) => T::ShortShortInt(*x),
        FieldValue::U8(x) => T::ShortShortUInt(*x),
        FieldValue::I16(x) => T::ShortInt(*x),
        FieldValue::U16(x) => T::ShortUInt(*x),
        FieldValue::I32(x) => T::LongInt(*x),
        FieldValue::U32(x) => T::LongUInt(*x),
        FieldValue::I64(x) => T::LongLongInt(*x),
        FieldValue::F32(x) => T::Float(*x),
        FieldValue::F64(x) => T::Double(*x),
        FieldValue::Decimal { scale, value } => T::DecimalValue(theirs::DecimalValue {
            scale: *scale,
            value: *value,
        }),
        FieldValue::LongStr(b) => T::LongString(b.to_vec().into()),
        FieldValue::Array(a) => T::FieldArray(a.iter().map(their_value).collect::<Vec<_>>().into()),
        FieldValue::Timestamp(t) => T::Timestamp(*t),
        FieldValue::Table(t) => T::FieldTable(their_table(t)),
        FieldValue::Void => T::Void,
        FieldValue::Bytes(b) => T::ByteArray(b.to_vec().into()),
    }
}

fn their_table(t: &FieldTable) -> theirs::FieldTable {
    let mut out = theirs::FieldTable::default();
    for (k, v) in t.iter() {
        out.insert(k.as_str().into(), their_value(v));
    }
    out
}

fn ss(s: &ShortStr) -> theirs::ShortString {
    s.as_str().into()
}

fn ls(b: &Bytes) -> theirs::LongString {
    b.to_vec().into()
}

// ---------------------------------------------------------------------------------------------
// Method pairs: the same method built for each codec.

type Pair = (Method, AMQPClass);

/// connection.start, start-ok, tune and tune-ok.
fn connection_handshake_pairs() -> Vec<BoxedStrategy<Pair>> {
    use connection::AMQPMethod as C;
    vec![
        (any::<u8>(), any::<u8>(), table(), blob(), blob())
            .prop_map(|(major, minor, props, mech, loc)| {
                let ours = ConnectionStart {
                    version_major: major,
                    version_minor: minor,
                    server_properties: props,
                    mechanisms: mech.into(),
                    locales: loc.into(),
                };
                let theirs = connection::Start {
                    version_major: major,
                    version_minor: minor,
                    server_properties: their_table(&ours.server_properties),
                    mechanisms: ls(&ours.mechanisms),
                    locales: ls(&ours.locales),
                };
                (ours.into(), AMQPClass::Connection(C::Start(theirs)))
            })
            .boxed(),
        (table(), name(), blob(), name())
            .prop_map(|(props, mech, resp, locale)| {
                let ours = ConnectionStartOk {
                    client_properties: props,
                    mechanism: mech.into(),
                    response: resp.into(),
                    locale: locale.into(),
                };
                let theirs = connection::StartOk {
                    client_properties: their_table(&ours.client_properties),
                    mechanism: ss(&ours.mechanism),
                    response: ls(&ours.response),
                    locale: ss(&ours.locale),
                };
                (ours.into(), AMQPClass::Connection(C::StartOk(theirs)))
            })
            .boxed(),
        (any::<u16>(), any::<u32>(), any::<u16>(), any::<bool>())
            .prop_map(|(channel_max, frame_max, heartbeat, ok)| {
                let ours = ConnectionTune {
                    channel_max,
                    frame_max,
                    heartbeat,
                };
                if ok {
                    let theirs = connection::TuneOk {
                        channel_max,
                        frame_max,
                        heartbeat,
                    };
                    let ours = ConnectionTuneOk {
                        channel_max,
                        frame_max,
                        heartbeat,
                    };
                    return (ours.into(), AMQPClass::Connection(C::TuneOk(theirs)));
                }
                let theirs = connection::Tune {
                    channel_max,
                    frame_max,
                    heartbeat,
                };
                (ours.into(), AMQPClass::Connection(C::Tune(theirs)))
            })
            .boxed(),
    ]
}

/// connection.open, close and their -ok replies.
fn connection_open_close_pairs() -> Vec<BoxedStrategy<Pair>> {
    use connection::AMQPMethod as C;
    vec![
        name()
            .prop_map(|vhost| {
                let ours = ConnectionOpen {
                    virtual_host: vhost.into(),
                    ..Default::default()
                };
                let theirs = connection::Open {
                    virtual_host: ss(&ours.virtual_host),
                };
                (ours.into(), AMQPClass::Connection(C::Open(theirs)))
            })
            .boxed(),
        (any::<u16>(), name(), any::<u16>(), any::<u16>())
            .prop_map(|(code, text, class_id, method_id)| {
                let ours = ConnectionClose {
                    reply_code: code,
                    reply_text: text.into(),
                    class_id,
                    method_id,
                };
                let theirs = connection::Close {
                    reply_code: code,
                    reply_text: ss(&ours.reply_text),
                    class_id,
                    method_id,
                };
                (ours.into(), AMQPClass::Connection(C::Close(theirs)))
            })
            .boxed(),
        Just((
            ConnectionOpenOk::default().into(),
            AMQPClass::Connection(C::OpenOk(connection::OpenOk {})),
        ))
        .boxed(),
        Just((
            ConnectionCloseOk.into(),
            AMQPClass::Connection(C::CloseOk(connection::CloseOk {})),
        ))
        .boxed(),
    ]
}

/// channel.open and channel.close.
fn channel_pairs() -> Vec<BoxedStrategy<Pair>> {
    vec![
        Just((
            ChannelOpen::default().into(),
            AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
        ))
        .boxed(),
        (any::<u16>(), name(), any::<u16>(), any::<u16>())
            .prop_map(|(code, text, class_id, method_id)| {
                let theirs = channel::Close {
                    reply_code: code,
                    reply_text: text.as_str().into(),
                    class_id,
                    method_id,
                };
                let ours = ChannelClose {
                    reply_code: code,
                    reply_text: text.into(),
                    class_id,
                    method_id,
                };
                (
                    ours.into(),
                    AMQPClass::Channel(channel::AMQPMethod::Close(theirs)),
                )
            })
            .boxed(),
    ]
}

/// queue.declare and queue.declare-ok.
fn queue_pairs() -> Vec<BoxedStrategy<Pair>> {
    vec![
        (name(), [any::<bool>(); 5], table())
            .prop_map(
                |(q, [passive, durable, exclusive, auto_delete, nowait], arguments)| {
                    let theirs = queue::Declare {
                        queue: q.as_str().into(),
                        passive,
                        durable,
                        exclusive,
                        auto_delete,
                        nowait,
                        arguments: their_table(&arguments),
                    };
                    let ours = QueueDeclare {
                        ticket: 0,
                        queue: q.into(),
                        passive,
                        durable,
                        exclusive,
                        auto_delete,
                        nowait,
                        arguments,
                    };
                    (
                        ours.into(),
                        AMQPClass::Queue(queue::AMQPMethod::Declare(theirs)),
                    )
                },
            )
            .boxed(),
        (name(), any::<u32>(), any::<u32>())
            .prop_map(|(q, message_count, consumer_count)| {
                let theirs = queue::DeclareOk {
                    queue: q.as_str().into(),
                    message_count,
                    consumer_count,
                };
                let ours = QueueDeclareOk {
                    queue: q.into(),
                    message_count,
                    consumer_count,
                };
                (
                    ours.into(),
                    AMQPClass::Queue(queue::AMQPMethod::DeclareOk(theirs)),
                )
            })
            .boxed(),
    ]
}

/// exchange.declare and confirm.select.
fn exchange_and_confirm_pairs() -> Vec<BoxedStrategy<Pair>> {
    vec![
        (name(), name(), [any::<bool>(); 5], table())
            .prop_map(
                |(x, kind, [passive, durable, auto_delete, internal, nowait], arguments)| {
                    let theirs = exchange::Declare {
                        exchange: x.as_str().into(),
                        kind: kind.as_str().into(),
                        passive,
                        durable,
                        auto_delete,
                        internal,
                        nowait,
                        arguments: their_table(&arguments),
                    };
                    let ours = ExchangeDeclare {
                        ticket: 0,
                        exchange: x.into(),
                        kind: kind.into(),
                        passive,
                        durable,
                        auto_delete,
                        internal,
                        nowait,
                        arguments,
                    };
                    (
                        ours.into(),
                        AMQPClass::Exchange(exchange::AMQPMethod::Declare(theirs)),
                    )
                },
            )
            .boxed(),
        any::<bool>()
            .prop_map(|nowait| {
                let theirs = confirm::Select { nowait };
                (
                    ConfirmSelect { nowait }.into(),
                    AMQPClass::Confirm(confirm::AMQPMethod::Select(theirs)),
                )
            })
            .boxed(),
    ]
}

/// basic.publish and basic.deliver: the methods that carry content.
fn basic_publish_pairs() -> Vec<BoxedStrategy<Pair>> {
    use basic::AMQPMethod as B;
    vec![
        (name(), name(), any::<bool>(), any::<bool>())
            .prop_map(|(x, rk, mandatory, immediate)| {
                let theirs = basic::Publish {
                    exchange: x.as_str().into(),
                    routing_key: rk.as_str().into(),
                    mandatory,
                    immediate,
                };
                let ours = BasicPublish {
                    ticket: 0,
                    exchange: x.into(),
                    routing_key: rk.into(),
                    mandatory,
                    immediate,
                };
                (ours.into(), AMQPClass::Basic(B::Publish(theirs)))
            })
            .boxed(),
        (name(), any::<u64>(), any::<bool>(), name(), name())
            .prop_map(|(tag, delivery_tag, redelivered, x, rk)| {
                let theirs = basic::Deliver {
                    consumer_tag: tag.as_str().into(),
                    delivery_tag,
                    redelivered,
                    exchange: x.as_str().into(),
                    routing_key: rk.as_str().into(),
                };
                let ours = BasicDeliver {
                    consumer_tag: tag.into(),
                    delivery_tag,
                    redelivered,
                    exchange: x.into(),
                    routing_key: rk.into(),
                };
                (ours.into(), AMQPClass::Basic(B::Deliver(theirs)))
            })
            .boxed(),
    ]
}

/// basic.nack, basic.ack and basic.reject.
fn basic_settle_pairs() -> Vec<BoxedStrategy<Pair>> {
    use basic::AMQPMethod as B;
    vec![
        (any::<u64>(), any::<bool>(), any::<bool>())
            .prop_map(|(delivery_tag, multiple, requeue)| {
                let theirs = basic::Nack {
                    delivery_tag,
                    multiple,
                    requeue,
                };
                let ours = BasicNack {
                    delivery_tag,
                    multiple,
                    requeue,
                };
                (ours.into(), AMQPClass::Basic(B::Nack(theirs)))
            })
            .boxed(),
        (any::<u64>(), any::<bool>(), any::<bool>())
            .prop_map(|(delivery_tag, multiple, reject)| {
                if reject {
                    let theirs = basic::Reject {
                        delivery_tag,
                        requeue: multiple,
                    };
                    let ours = BasicReject {
                        delivery_tag,
                        requeue: multiple,
                    };
                    return (ours.into(), AMQPClass::Basic(B::Reject(theirs)));
                }
                let theirs = basic::Ack {
                    delivery_tag,
                    multiple,
                };
                (
                    BasicAck {
                        delivery_tag,
                        multiple,
                    }
                    .into(),
                    AMQPClass::Basic(B::Ack(theirs)),
                )
            })
            .boxed(),
    ]
}

/// basic.consume, basic.qos and basic.return.
fn basic_consume_pairs() -> Vec<BoxedStrategy<Pair>> {
    use basic::AMQPMethod as B;
    vec![
        (name(), name(), [any::<bool>(); 4], table())
            .prop_map(
                |(q, tag, [no_local, no_ack, exclusive, nowait], arguments)| {
                    let theirs = basic::Consume {
                        queue: q.as_str().into(),
                        consumer_tag: tag.as_str().into(),
                        no_local,
                        no_ack,
                        exclusive,
                        nowait,
                        arguments: their_table(&arguments),
                    };
                    let ours = BasicConsume {
                        ticket: 0,
                        queue: q.into(),
                        consumer_tag: tag.into(),
                        no_local,
                        no_ack,
                        exclusive,
                        nowait,
                        arguments,
                    };
                    (ours.into(), AMQPClass::Basic(B::Consume(theirs)))
                },
            )
            .boxed(),
        (any::<u16>(), any::<bool>())
            .prop_map(|(prefetch_count, global)| {
                // amq-protocol leaves out prefetch-size (RabbitMQ refuses non-zero sizes).
                let theirs = basic::Qos {
                    prefetch_count,
                    global,
                };
                let ours = BasicQos {
                    prefetch_size: 0,
                    prefetch_count,
                    global,
                };
                (ours.into(), AMQPClass::Basic(B::Qos(theirs)))
            })
            .boxed(),
        (any::<u16>(), name(), name(), name())
            .prop_map(|(code, text, x, rk)| {
                let theirs = basic::Return {
                    reply_code: code,
                    reply_text: text.as_str().into(),
                    exchange: x.as_str().into(),
                    routing_key: rk.as_str().into(),
                };
                let ours = BasicReturn {
                    reply_code: code,
                    reply_text: text.into(),
                    exchange: x.into(),
                    routing_key: rk.into(),
                };
                (ours.into(), AMQPClass::Basic(B::Return(theirs)))
            })
            .boxed(),
    ]
}

fn any_pair() -> impl Strategy<Value = Pair> {
    let mut all = connection_handshake_pairs();
    all.extend(connection_open_close_pairs());
    all.extend(channel_pairs());
    all.extend(queue_pairs());
    all.extend(exchange_and_confirm_pairs());
    all.extend(basic_publish_pairs());
    all.extend(basic_settle_pairs());
    all.extend(basic_consume_pairs());
    proptest::strategy::Union::new(all)
}

// ---------------------------------------------------------------------------------------------
// Properties.

fn properties() -> impl Strategy<Value = BasicProperties> {
    let opt = || proptest::option::of(name().prop_map(ShortStr::from));
    let strings = (
        opt(),
        opt(),
        opt(),
        opt(),
        opt(),
        opt(),
        opt(),
        opt(),
        opt(),
        opt(),
    );
    let others = (
        proptest::option::of(table()),
        proptest::option::of(any::<u8>()),
        proptest::option::of(any::<u8>()),
        proptest::option::of(any::<u64>()),
    );
    (strings, others).prop_map(|(s, o)| BasicProperties {
        content_type: s.0,
        content_encoding: s.1,
        headers: o.0,
        delivery_mode: o.1,
        priority: o.2,
        correlation_id: s.2,
        reply_to: s.3,
        expiration: s.4,
        message_id: s.5,
        timestamp: o.3,
        kind: s.6,
        user_id: s.7,
        app_id: s.8,
        cluster_id: s.9,
    })
}

fn their_properties(p: &BasicProperties) -> basic::AMQPProperties {
    let mut t = basic::AMQPProperties::default();
    let s = |v: &Option<ShortStr>| v.as_ref().map(ss);
    if let Some(v) = s(&p.content_type) {
        t = t.with_content_type(v);
    }
    if let Some(v) = s(&p.content_encoding) {
        t = t.with_content_encoding(v);
    }
    if let Some(v) = &p.headers {
        t = t.with_headers(their_table(v));
    }
    if let Some(v) = p.delivery_mode {
        t = t.with_delivery_mode(v);
    }
    if let Some(v) = p.priority {
        t = t.with_priority(v);
    }
    if let Some(v) = s(&p.correlation_id) {
        t = t.with_correlation_id(v);
    }
    if let Some(v) = s(&p.reply_to) {
        t = t.with_reply_to(v);
    }
    if let Some(v) = s(&p.expiration) {
        t = t.with_expiration(v);
    }
    if let Some(v) = s(&p.message_id) {
        t = t.with_message_id(v);
    }
    if let Some(v) = p.timestamp {
        t = t.with_timestamp(v);
    }
    if let Some(v) = s(&p.kind) {
        t = t.with_type(v);
    }
    if let Some(v) = s(&p.user_id) {
        t = t.with_user_id(v);
    }
    if let Some(v) = s(&p.app_id) {
        t = t.with_app_id(v);
    }
    if let Some(v) = s(&p.cluster_id) {
        t = t.with_cluster_id(v);
    }
    t
}

// ---------------------------------------------------------------------------------------------
// The two directions.

fn their_bytes(frame: &AMQPFrame) -> Vec<u8> {
    gen_frame(frame)(WriteContext::from(Vec::new()))
        .expect("amq-protocol encodes")
        .write
}

fn their_parse(bytes: &[u8]) -> AMQPFrame {
    let (rest, frame) = parse_frame(bytes).expect("amq-protocol decodes our frame");
    assert!(rest.is_empty(), "amq-protocol left {} bytes", rest.len());
    frame
}

fn our_parse(bytes: &[u8]) -> Frame {
    let mut buf = BytesMut::from(bytes);
    let frame = decode_frame(&mut buf, 0)
        .expect("we decode their frame")
        .expect("a whole frame");
    assert!(buf.is_empty());
    frame
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn methods_agree((ours, theirs) in any_pair(), channel in any::<u16>()) {
        let mut our_bytes = BytesMut::new();
        encode_method_frame(channel, &ours, &mut our_bytes);
        let their_frame = AMQPFrame::Method(channel, theirs);
        prop_assert_eq!(their_parse(&our_bytes), their_frame.clone());
        let their_bytes = their_bytes(&their_frame);
        prop_assert_eq!(our_parse(&their_bytes), Frame::Method { channel, method: ours });
        prop_assert_eq!(&our_bytes[..], &their_bytes[..]);
    }

    #[test]
    fn content_headers_agree(
        ours in properties(),
        body_size in any::<u64>(),
        channel in any::<u16>(),
    ) {
        let mut raw = BytesMut::new();
        ours.encode(&mut raw);
        let mut our_bytes = BytesMut::new();
        encode_content_header(channel, 60, body_size, &raw, &mut our_bytes);
        let properties = their_properties(&ours);
        let header = AMQPContentHeader { class_id: 60, body_size, properties };
        let their_frame = AMQPFrame::Header(channel, header);
        prop_assert_eq!(their_parse(&our_bytes), their_frame.clone());
        let their_bytes = their_bytes(&their_frame);
        let Frame::Header { channel: c, header } = our_parse(&their_bytes) else {
            panic!("expected a content header");
        };
        prop_assert_eq!(c, channel);
        prop_assert_eq!(header.body_size, body_size);
        prop_assert_eq!(peek_delivery_mode(&header.properties), ours.delivery_mode);
        prop_assert_eq!(BasicProperties::decode(&header.properties), Ok(ours));
        prop_assert_eq!(&our_bytes[..], &their_bytes[..]);
    }

    #[test]
    fn bodies_and_heartbeats_agree(body in blob(), channel in any::<u16>()) {
        let mut our_bytes = BytesMut::new();
        encode_body_frame(channel, &body, &mut our_bytes);
        let their_frame = AMQPFrame::Body(channel, body.clone());
        prop_assert_eq!(their_parse(&our_bytes), their_frame.clone());
        prop_assert_eq!(&our_bytes[..], &their_bytes(&their_frame)[..]);
        let mut heartbeat = BytesMut::new();
        encode_heartbeat(&mut heartbeat);
        prop_assert_eq!(their_parse(&heartbeat), AMQPFrame::Heartbeat);
        let their_heartbeat = their_bytes(&AMQPFrame::Heartbeat);
        prop_assert_eq!(our_parse(&their_heartbeat), Frame::Heartbeat { channel: 0 });
    }
}

#[test]
fn a_table_with_every_type_agrees() {
    let mut args = FieldTable::default();
    for (i, v) in [
        FieldValue::Bool(true),
        FieldValue::I8(-1),
        FieldValue::U8(255),
        FieldValue::I16(-300),
        FieldValue::U16(60_000),
        FieldValue::I32(-70_000),
        FieldValue::U32(4_000_000_000),
        FieldValue::I64(-5_000_000_000),
        FieldValue::F32(1.5),
        FieldValue::F64(-2.25),
        FieldValue::Decimal {
            scale: 2,
            value: 12_345,
        },
        FieldValue::LongStr(Bytes::from_static(b"quorum")),
        FieldValue::Array(vec![FieldValue::Void, FieldValue::I64(1)]),
        FieldValue::Timestamp(1_700_000_000),
        FieldValue::Table(FieldTable::default()),
        FieldValue::Void,
        FieldValue::Bytes(Bytes::from_static(&[0, 1, 2])),
    ]
    .into_iter()
    .enumerate()
    {
        args.insert(format!("k{i:02}"), v);
    }
    let ours: Method = QueueDeclare {
        arguments: args.clone(),
        ..Default::default()
    }
    .into();
    let theirs = AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
        arguments: their_table(&args),
        ..Default::default()
    }));
    let mut our_bytes = BytesMut::new();
    encode_method_frame(1, &ours, &mut our_bytes);
    let their_frame = AMQPFrame::Method(1, theirs);
    assert_eq!(their_parse(&our_bytes), their_frame);
    assert_eq!(&our_bytes[..], &their_bytes(&their_frame)[..]);
}

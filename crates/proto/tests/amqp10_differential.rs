//! Differential tests of the AMQP 1.0 codec against `serde_amqp` / `fe2o3-amqp-types` (the
//! codec under fe2o3-amqp): values and performatives encoded by one decode with the other.

use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::definitions::{Error as Fe2o3Error, Handle, Role};
use fe2o3_amqp_types::messaging::{Accepted, DeliveryState as Fe2o3State, Source, Target};
use fe2o3_amqp_types::performatives::{
    Attach as Fe2o3Attach, Begin as Fe2o3Begin, Close as Fe2o3Close,
    Disposition as Fe2o3Disposition, Flow as Fe2o3Flow, Open as Fe2o3Open,
    Transfer as Fe2o3Transfer,
};
use proptest::prelude::*;
use serde_amqp::primitives::{Array, Symbol};
use warren_proto::amqp10::{DeliveryState, Performative, Value};

fn ours(bytes: &[u8]) -> Performative {
    let bytes = Bytes::copy_from_slice(bytes);
    let (value, used) = Value::decode(&bytes).expect("our decoder reads serde_amqp's bytes");
    assert_eq!(used, bytes.len());
    Performative::from_value(value).expect("a performative")
}

fn encoded(performative: &Performative) -> Vec<u8> {
    let mut out = BytesMut::new();
    performative.to_value().encode(&mut out);
    out.to_vec()
}

#[test]
fn open_both_ways() {
    let theirs = Fe2o3Open {
        container_id: "client-1".into(),
        hostname: Some("vhost:/".into()),
        max_frame_size: 65536.into(),
        channel_max: 7.into(),
        idle_time_out: Some(30_000),
        outgoing_locales: None,
        incoming_locales: None,
        offered_capabilities: Some(Array(vec![Symbol::from("ANONYMOUS-RELAY")])),
        desired_capabilities: None,
        properties: None,
    };
    let Performative::Open(open) = ours(&serde_amqp::to_vec(&theirs).unwrap()) else {
        panic!("not an open");
    };
    assert_eq!(open.container_id, "client-1");
    assert_eq!(open.hostname.as_deref(), Some("vhost:/"));
    assert_eq!(open.max_frame_size, Some(65536));
    assert_eq!(open.channel_max, Some(7));
    assert_eq!(open.idle_time_out, Some(30_000));
    assert_eq!(open.offered_capabilities, ["ANONYMOUS-RELAY"]);
    let back: Fe2o3Open = serde_amqp::from_slice(&encoded(&Performative::Open(open))).unwrap();
    assert_eq!(back.container_id, theirs.container_id);
    assert_eq!(back.max_frame_size.0, 65536);
    assert_eq!(back.channel_max.0, 7);
    assert_eq!(back.idle_time_out, Some(30_000));
}

#[test]
fn begin_flow_and_close_both_ways() {
    let begin = Fe2o3Begin {
        remote_channel: Some(3),
        next_outgoing_id: 9,
        incoming_window: 400,
        outgoing_window: 500,
        handle_max: Handle(255),
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    };
    let ours_begin = ours(&serde_amqp::to_vec(&begin).unwrap());
    let Performative::Begin(b) = &ours_begin else {
        panic!()
    };
    assert_eq!(
        (b.remote_channel, b.next_outgoing_id, b.incoming_window),
        (Some(3), 9, 400)
    );
    assert_eq!((b.outgoing_window, b.handle_max), (500, Some(255)));
    let back: Fe2o3Begin = serde_amqp::from_slice(&encoded(&ours_begin)).unwrap();
    assert_eq!(back.handle_max.0, 255);
    assert_eq!(back.remote_channel, Some(3));

    let flow = Fe2o3Flow {
        next_incoming_id: Some(1),
        incoming_window: 2,
        next_outgoing_id: 3,
        outgoing_window: 4,
        handle: Some(Handle(5)),
        delivery_count: Some(6),
        link_credit: Some(200),
        available: None,
        drain: true,
        echo: false,
        properties: None,
    };
    let ours_flow = ours(&serde_amqp::to_vec(&flow).unwrap());
    let Performative::Flow(f) = &ours_flow else {
        panic!()
    };
    assert_eq!(
        (f.handle, f.delivery_count, f.link_credit, f.drain),
        (Some(5), Some(6), Some(200), true)
    );
    let back: Fe2o3Flow = serde_amqp::from_slice(&encoded(&ours_flow)).unwrap();
    assert_eq!(back.link_credit, Some(200));
    assert!(back.drain && !back.echo);

    let close = Fe2o3Close {
        error: Some(Fe2o3Error::new(
            fe2o3_amqp_types::definitions::AmqpError::DecodeError,
            Some("bad frame".to_string()),
            None,
        )),
    };
    let ours_close = ours(&serde_amqp::to_vec(&close).unwrap());
    let Performative::Close(c) = &ours_close else {
        panic!()
    };
    let error = c.error.as_ref().unwrap();
    assert_eq!(error.condition, "amqp:decode-error");
    assert_eq!(error.description.as_deref(), Some("bad frame"));
    let back: Fe2o3Close = serde_amqp::from_slice(&encoded(&ours_close)).unwrap();
    assert_eq!(
        back.error.unwrap().description.as_deref(),
        Some("bad frame")
    );
}

#[test]
fn attach_both_ways() {
    let attach = Fe2o3Attach {
        name: "link-1".into(),
        handle: Handle(2),
        role: Role::Receiver,
        snd_settle_mode: Default::default(),
        rcv_settle_mode: Default::default(),
        source: Some(Box::new(Source::builder().address("/queues/q1").build())),
        target: Some(Box::new(Target::builder().address("t").build().into())),
        unsettled: None,
        incomplete_unsettled: false,
        initial_delivery_count: Some(0),
        max_message_size: Some(1024),
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    };
    let ours_attach = ours(&serde_amqp::to_vec(&attach).unwrap());
    let Performative::Attach(a) = &ours_attach else {
        panic!()
    };
    assert_eq!((a.name.as_str(), a.handle, a.role), ("link-1", 2, true));
    let source = a.source.as_ref().unwrap();
    assert_eq!(source.address.as_deref(), Some("/queues/q1"));
    assert_eq!(a.target.as_ref().unwrap().address.as_deref(), Some("t"));
    assert_eq!(a.max_message_size, Some(1024));
    let back: Fe2o3Attach = serde_amqp::from_slice(&encoded(&ours_attach)).unwrap();
    assert_eq!(back.name, "link-1");
    assert_eq!(back.source.unwrap().address.as_deref(), Some("/queues/q1"));
}

#[test]
fn transfer_both_ways() {
    let transfer = Fe2o3Transfer {
        handle: Handle(2),
        delivery_id: Some(77),
        delivery_tag: Some(fe2o3_amqp_types::definitions::DeliveryTag::from(vec![
            1, 2, 3,
        ])),
        message_format: Some(0),
        settled: Some(false),
        more: true,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: true,
    };
    let ours_transfer = ours(&serde_amqp::to_vec(&transfer).unwrap());
    let Performative::Transfer(t) = &ours_transfer else {
        panic!()
    };
    assert_eq!(
        (t.handle, t.delivery_id, t.more, t.batchable),
        (2, Some(77), true, true)
    );
    assert_eq!(t.delivery_tag.as_deref(), Some(&[1u8, 2, 3][..]));
    let back: Fe2o3Transfer = serde_amqp::from_slice(&encoded(&ours_transfer)).unwrap();
    assert_eq!(back.delivery_id, Some(77));
    assert!(back.more);
}

#[test]
fn disposition_both_ways() {
    let disposition = Fe2o3Disposition {
        role: Role::Receiver,
        first: 10,
        last: Some(20),
        settled: true,
        state: Some(Fe2o3State::Accepted(Accepted {})),
        batchable: false,
    };
    let ours_disposition = ours(&serde_amqp::to_vec(&disposition).unwrap());
    let Performative::Disposition(d) = &ours_disposition else {
        panic!()
    };
    assert_eq!(
        (d.role, d.first, d.last, d.settled),
        (true, 10, Some(20), true)
    );
    assert_eq!(d.state, Some(DeliveryState::Accepted));
    let back: Fe2o3Disposition = serde_amqp::from_slice(&encoded(&ours_disposition)).unwrap();
    assert!(matches!(back.state, Some(Fe2o3State::Accepted(_))));
    assert_eq!(back.last, Some(20));
}

fn value_strategy() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u8>().prop_map(Value::Ubyte),
        any::<u16>().prop_map(Value::Ushort),
        any::<u32>().prop_map(Value::Uint),
        any::<u64>().prop_map(Value::Ulong),
        any::<i8>().prop_map(Value::Byte),
        any::<i16>().prop_map(Value::Short),
        any::<i32>().prop_map(Value::Int),
        any::<i64>().prop_map(Value::Long),
        any::<i64>().prop_map(Value::Timestamp),
        any::<[u8; 16]>().prop_map(Value::Uuid),
        any::<char>().prop_map(Value::Char),
        prop::collection::vec(any::<u8>(), 0..300).prop_map(|b| Value::Binary(Bytes::from(b))),
        ".{0,40}".prop_map(|s: String| Value::string(&s)),
        "[a-z:-]{0,20}".prop_map(|s: String| Value::symbol(&s)),
        prop::collection::vec(any::<u32>(), 1..20)
            .prop_map(|v| Value::Array(v.into_iter().map(Value::Uint).collect())),
    ];
    leaf.prop_recursive(3, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::List),
            prop::collection::vec(("[a-z]{1,8}", inner), 0..6).prop_map(|pairs| {
                let mut seen = std::collections::HashSet::new();
                Value::Map(
                    pairs
                        .into_iter()
                        .filter(|(k, _)| seen.insert(k.clone()))
                        .map(|(k, v)| (Value::symbol(&k), v))
                        .collect(),
                )
            }),
        ]
    })
}

proptest! {
    /// Ours -> serde_amqp -> ours gives the value back: serde_amqp reads every encoding we
    /// write, and we read every encoding it writes for the same value.
    #[test]
    fn values_survive_a_trip_through_serde_amqp(value in value_strategy()) {
        let mut out = BytesMut::new();
        value.encode(&mut out);
        let theirs: serde_amqp::Value = serde_amqp::from_slice(&out).expect("serde_amqp decodes ours");
        let again = Bytes::from(serde_amqp::to_vec(&theirs).expect("serde_amqp encodes"));
        let (back, used) = Value::decode(&again).expect("we decode serde_amqp's");
        prop_assert_eq!(used, again.len());
        prop_assert_eq!(back, value);
    }
}

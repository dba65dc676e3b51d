//! Permissions on the stream protocol, as for AMQP: configure to create or delete a stream,
//! write to publish, read to subscribe or query; refusals answered with access refused.

mod stream_support;

use rabbitmq_stream_client::types::{OffsetSpecification, ResponseCode};
use rabbitmq_stream_client::Client;
use stream_support::{environment, options_as};
use warren_core::access::format::PermissionDef;
use warren_tests::{bounded, unique, TestBroker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_command_needs_its_permission() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("adds a user to the in-process broker") {
        return;
    }
    let stream = unique("stream-perm");
    let environment = environment(&broker).await;
    bounded!(environment.stream_creator().create(&stream)).unwrap();
    let access = broker.core().access();
    bounded!(access.put_user("reader", Some("pw"), None, Vec::new())).unwrap();
    // Read only, on everything.
    let permissions = PermissionDef {
        user: "reader".into(),
        vhost: "/".into(),
        configure: "^$".into(),
        write: "^$".into(),
        read: ".*".into(),
    };
    bounded!(access.set_permissions(permissions)).unwrap();
    let reader = bounded!(Client::connect(options_as(&broker, "reader", "pw", "/"))).unwrap();
    let created = bounded!(reader.create_stream("other", Default::default())).unwrap();
    assert_eq!(created.code(), &ResponseCode::AccessRefused);
    let deleted = bounded!(reader.delete_stream(&stream)).unwrap();
    assert_eq!(deleted.code(), &ResponseCode::AccessRefused);
    let declared = bounded!(reader.declare_publisher(1, None, &stream)).unwrap();
    assert_eq!(declared.code(), &ResponseCode::AccessRefused);
    let subscribed = bounded!(reader.subscribe(
        1,
        &stream,
        OffsetSpecification::First,
        1,
        Default::default()
    ))
    .unwrap();
    assert_eq!(subscribed.code(), &ResponseCode::Ok, "read is granted");
    // Nothing but write, on nothing else.
    let permissions = PermissionDef {
        user: "reader".into(),
        vhost: "/".into(),
        configure: "^$".into(),
        write: ".*".into(),
        read: "^$".into(),
    };
    bounded!(access.set_permissions(permissions)).unwrap();
    let writer = bounded!(Client::connect(options_as(&broker, "reader", "pw", "/"))).unwrap();
    let subscribed = bounded!(writer.subscribe(
        1,
        &stream,
        OffsetSpecification::First,
        1,
        Default::default()
    ))
    .unwrap();
    assert_eq!(subscribed.code(), &ResponseCode::AccessRefused);
    let declared = bounded!(writer.declare_publisher(1, None, &stream)).unwrap();
    assert_eq!(declared.code(), &ResponseCode::Ok, "write is granted");
}

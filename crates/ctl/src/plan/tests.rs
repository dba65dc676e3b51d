//! Unit tests of the plans: the request each command line maps to.

use clap::Parser;
use serde_json::json;

use super::*;

fn plan_of(args: &str) -> Plan {
    let cli = Cli::try_parse_from(std::iter::once("warren ctl").chain(args.split(' ')))
        .unwrap_or_else(|error| panic!("{args}: {error}"));
    plan(&cli).unwrap()
}

/// (method, path, body) of a one-request command.
fn request_of(args: &str) -> (Method, String, Option<Value>) {
    match plan_of(args) {
        Plan::Call { request, .. } => (request.method, request.path, request.body),
        other => panic!("{args}: {other:?}"),
    }
}

fn get(path: &str) -> (Method, String, Option<Value>) {
    (Method::Get, path.to_string(), None)
}

#[test]
fn encode_escapes_all_but_unreserved() {
    assert_eq!(encode("/"), "%2F");
    assert_eq!(encode("a b/c%d"), "a%20b%2Fc%25d");
    assert_eq!(encode("Az09-._~"), "Az09-._~");
    assert_eq!(encode("é"), "%C3%A9");
}

#[test]
fn lists_are_vhost_scoped_unless_all_vhosts() {
    assert_eq!(request_of("list queues"), get("/api/queues/%2F"));
    assert_eq!(request_of("list queues --all-vhosts"), get("/api/queues"));
    assert_eq!(
        request_of("list exchanges --vhost dev"),
        get("/api/exchanges/dev")
    );
    assert_eq!(
        request_of("--vhost v/1 list bindings"),
        get("/api/bindings/v%2F1")
    );
    assert_eq!(
        request_of("list connections"),
        get("/api/vhosts/%2F/connections")
    );
    assert_eq!(
        request_of("list channels --all-vhosts"),
        get("/api/channels")
    );
    assert_eq!(request_of("list consumers"), get("/api/consumers/%2F"));
    assert_eq!(
        request_of("list stream_connections"),
        get("/api/stream/connections/%2F")
    );
    assert_eq!(
        request_of("list stream-publishers --all-vhosts"),
        get("/api/stream/publishers")
    );
    assert_eq!(
        request_of("list stream_consumers"),
        get("/api/stream/consumers/%2F")
    );
    assert_eq!(request_of("list users"), get("/api/users"));
    assert_eq!(request_of("list vhosts"), get("/api/vhosts"));
    assert_eq!(
        request_of("list permissions"),
        get("/api/vhosts/%2F/permissions")
    );
    assert_eq!(
        request_of("list topic-permissions --all-vhosts"),
        get("/api/topic-permissions")
    );
    assert_eq!(request_of("list policies"), get("/api/policies/%2F"));
    assert_eq!(
        request_of("list operator-policies"),
        get("/api/operator-policies/%2F")
    );
    assert_eq!(
        request_of("list vhost-limits"),
        get("/api/vhost-limits/%2F")
    );
    assert_eq!(request_of("status"), get("/api/overview"));
    assert_eq!(request_of("alarms"), get("/api/health/checks/alarms"));
}

#[test]
fn declare_queue() {
    assert_eq!(
        request_of("declare queue --name q1"),
        (
            Method::Put,
            "/api/queues/%2F/q1".to_string(),
            Some(json!({"durable": true, "auto_delete": false, "arguments": {}}))
        )
    );
    assert_eq!(
        request_of(
            "declare queue --name q/2 --vhost dev --type quorum --durable true \
             --arguments {\"x-max-length\":10}"
        ),
        (
            Method::Put,
            "/api/queues/dev/q%2F2".to_string(),
            Some(json!({"durable": true, "auto_delete": false,
                "arguments": {"x-max-length": 10, "x-queue-type": "quorum"}}))
        )
    );
    let (_, _, body) = request_of("declare queue --name t --durable false --auto-delete");
    assert_eq!(
        body,
        Some(json!({"durable": false, "auto_delete": true, "arguments": {}}))
    );
}

#[test]
fn bad_json_flags_are_errors() {
    let cli = Cli::try_parse_from([
        "warren ctl",
        "declare",
        "queue",
        "--name",
        "q",
        "--arguments",
        "[1]",
    ])
    .unwrap();
    assert!(plan(&cli).unwrap_err().contains("not a JSON object"));
    let cli = Cli::try_parse_from([
        "warren ctl",
        "declare",
        "policy",
        "--name",
        "p",
        "--pattern",
        ".*",
        "--definition",
        "{oops",
    ])
    .unwrap();
    assert!(plan(&cli).unwrap_err().contains("--definition: not JSON"));
}

#[test]
fn declare_exchange_and_binding() {
    assert_eq!(
        request_of("declare exchange --name ex --type topic"),
        (
            Method::Put,
            "/api/exchanges/%2F/ex".to_string(),
            Some(
                json!({"type": "topic", "durable": true, "auto_delete": false,
                "internal": false, "arguments": {}})
            )
        )
    );
    assert_eq!(
        request_of("declare binding --source ex --destination q1 --routing-key a.b"),
        (
            Method::Post,
            "/api/bindings/%2F/e/ex/q/q1".to_string(),
            Some(json!({"routing_key": "a.b", "arguments": {}}))
        )
    );
    let (_, path, _) =
        request_of("declare binding --source ex --destination ex2 --destination-type exchange");
    assert_eq!(path, "/api/bindings/%2F/e/ex/e/ex2");
}

#[test]
fn declare_users_vhosts_permissions() {
    assert_eq!(
        request_of("declare user --name bob --password s3cret --tags administrator,monitoring"),
        (
            Method::Put,
            "/api/users/bob".to_string(),
            Some(json!({"password": "s3cret", "tags": "administrator,monitoring"}))
        )
    );
    let (_, _, body) = request_of(
        "declare user --name h --password-hash abc= --hashing-algorithm \
         rabbit_password_hashing_sha256",
    );
    assert_eq!(
        body,
        Some(json!({"password_hash": "abc=", "tags": "",
            "hashing_algorithm": "rabbit_password_hashing_sha256"}))
    );
    assert!(Cli::try_parse_from(["warren ctl", "declare", "user", "--name", "x"]).is_err());
    assert_eq!(
        request_of("declare vhost --name dev --description testing --tags a,b"),
        (
            Method::Put,
            "/api/vhosts/dev".to_string(),
            Some(json!({"description": "testing", "tags": "a,b"}))
        )
    );
    assert_eq!(
        request_of("declare permission --user bob --vhost dev --configure .* --write .* --read ^r"),
        (
            Method::Put,
            "/api/permissions/dev/bob".to_string(),
            Some(json!({"configure": ".*", "write": ".*", "read": "^r"}))
        )
    );
    assert_eq!(
        request_of("declare topic-permission --user bob --exchange amq.topic --write ^a --read .*"),
        (
            Method::Put,
            "/api/topic-permissions/%2F/bob".to_string(),
            Some(json!({"exchange": "amq.topic", "write": "^a", "read": ".*"}))
        )
    );
}

#[test]
fn declare_policies_and_limits() {
    assert_eq!(
        request_of(
            "declare policy --name p1 --pattern ^q --definition {\"max-length\":5} \
             --priority 3 --apply-to quorum_queues"
        ),
        (
            Method::Put,
            "/api/policies/%2F/p1".to_string(),
            Some(
                json!({"pattern": "^q", "definition": {"max-length": 5}, "priority": 3,
                "apply-to": "quorum_queues"})
            )
        )
    );
    let (_, path, body) =
        request_of("declare operator-policy --name op --pattern .* --definition {}");
    assert_eq!(path, "/api/operator-policies/%2F/op");
    assert_eq!(body.unwrap()["apply-to"], "all");
    assert_eq!(
        request_of("declare vhost-limit --name max-queues --value 10"),
        (
            Method::Put,
            "/api/vhost-limits/%2F/max-queues".to_string(),
            Some(json!({"value": 10}))
        )
    );
    let (_, _, body) = request_of("declare vhost-limit --name max-connections --value -1");
    assert_eq!(body, Some(json!({"value": -1})));
}

#[test]
fn deletes() {
    let delete = |path: &str| (Method::Delete, path.to_string(), None);
    assert_eq!(
        request_of("delete queue --name q1"),
        delete("/api/queues/%2F/q1")
    );
    assert_eq!(
        request_of("delete queue --name q1 --if-empty --if-unused"),
        delete("/api/queues/%2F/q1?if-empty=true&if-unused=true")
    );
    assert_eq!(
        request_of("delete exchange --name ex --if-unused"),
        delete("/api/exchanges/%2F/ex?if-unused=true")
    );
    assert_eq!(
        request_of("delete user --name bob"),
        delete("/api/users/bob")
    );
    assert_eq!(
        request_of("delete vhost --name dev"),
        delete("/api/vhosts/dev")
    );
    assert_eq!(
        request_of("delete permission --user bob"),
        delete("/api/permissions/%2F/bob")
    );
    assert_eq!(
        request_of("delete topic-permission --user bob"),
        delete("/api/topic-permissions/%2F/bob")
    );
    assert_eq!(
        request_of("delete policy --name p"),
        delete("/api/policies/%2F/p")
    );
    assert_eq!(
        request_of("delete operator-policy --name p"),
        delete("/api/operator-policies/%2F/p")
    );
    assert_eq!(
        request_of("delete vhost-limit --name max-connections"),
        delete("/api/vhost-limits/%2F/max-connections")
    );
    assert_eq!(
        request_of("purge queue --name q1"),
        delete("/api/queues/%2F/q1/contents")
    );
    assert_eq!(
        plan_of("delete binding --source ex --destination q1 --routing-key k"),
        Plan::DeleteBinding {
            list: Request::get("/api/bindings/%2F/e/ex/q/q1".to_string()),
            routing_key: "k".to_string()
        }
    );
}

#[test]
fn binding_props_key_picks_the_routing_key() {
    let bindings = json!([
        {"routing_key": "a", "properties_key": "a"},
        {"routing_key": "b", "properties_key": "b~XyZ"},
        {"routing_key": 5},
    ]);
    assert_eq!(binding_props_key(&bindings, "b"), Some("b~XyZ"));
    assert_eq!(binding_props_key(&bindings, "c"), None);
    assert_eq!(binding_props_key(&json!({"odd": 1}), "a"), None);
}

#[test]
fn publish_get_export_import() {
    assert_eq!(
        request_of("publish --routing-key q1 --payload hello"),
        (
            Method::Post,
            "/api/exchanges/%2F/amq.default/publish".to_string(),
            Some(
                json!({"properties": {}, "routing_key": "q1", "payload": "hello",
                "payload_encoding": "string"})
            )
        )
    );
    let (_, path, body) = request_of(
        "publish --exchange ex --routing-key k --payload x --properties {\"delivery_mode\":2}",
    );
    assert_eq!(path, "/api/exchanges/%2F/ex/publish");
    assert_eq!(body.unwrap()["properties"], json!({"delivery_mode": 2}));
    assert_eq!(
        request_of("get --queue q1 --count 3 --ackmode ack_requeue_false"),
        (
            Method::Post,
            "/api/queues/%2F/q1/get".to_string(),
            Some(json!({"count": 3, "ackmode": "ack_requeue_false", "encoding": "auto"}))
        )
    );
    assert_eq!(
        plan_of("export"),
        Plan::Export {
            request: Request::get("/api/definitions".to_string()),
            file: None
        }
    );
    assert_eq!(
        plan_of("import defs.json"),
        Plan::Import {
            file: PathBuf::from("defs.json")
        }
    );
}

#[test]
fn stream_tracking_is_of_one_stream() {
    assert_eq!(
        request_of("list stream-tracking --vhost v/1 --stream s/1"),
        get("/api/stream/v%2F1/s%2F1/tracking?type=all")
    );
    assert_eq!(
        request_of("list stream_tracking --stream s --type offset"),
        get("/api/stream/%2F/s/tracking?type=offset")
    );
    assert_eq!(
        plan_of("list stream-tracking --stream s --type writer"),
        Plan::Call {
            request: Request::get("/api/stream/%2F/s/tracking?type=writer".to_string()),
            output: Output::Tracking,
        }
    );
    for args in [
        "list stream-tracking",
        "list stream-tracking --stream s --all-vhosts",
    ] {
        let cli =
            Cli::try_parse_from(std::iter::once("warren ctl").chain(args.split(' '))).unwrap();
        assert!(
            plan(&cli).unwrap_err().contains("stream-tracking"),
            "{args}"
        );
    }
}

#[test]
fn stream_tracking_rows() {
    let answer = json!({"offsets": {"b": 7, "a": 2}, "writers": {"app": 12}});
    let text = crate::render::tracking(&answer);
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("| ")).collect();
    assert_eq!(
        rows,
        [
            "| reference | type   | value |",
            "| a         | offset | 2     |",
            "| b         | offset | 7     |",
            "| app       | writer | 12    |",
        ]
    );
    let empty = json!({"offsets": {}, "writers": {}});
    assert_eq!(crate::render::tracking(&empty), "No items\n");
    assert_eq!(
        crate::render::tracking(&json!({"writers": {}})),
        "No items\n"
    );
}

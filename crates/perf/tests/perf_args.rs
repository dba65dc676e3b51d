//! The command line: every seed workload's PerfTest arguments parse to what PerfTest means by
//! them, and mistakes are refused with the flag's name.

use std::time::Duration;

use warren_perf::options::{ArgValue, Mode, QueuePattern, RunOptions};

fn parse(args: &str) -> RunOptions {
    let args: Vec<String> = args.split_whitespace().map(str::to_owned).collect();
    warren_perf::parse(args).unwrap().expect("not --help")
}

fn refused(args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    warren_perf::parse(args).unwrap_err().to_string()
}

#[test]
fn workload_a_autoack() {
    let o = parse("--uri amqp://guest:guest@127.0.0.1:5673 -x 1 -y 1 -s 12 -a -z 10");
    assert_eq!(
        (o.endpoint.host.as_str(), o.endpoint.port),
        ("127.0.0.1", 5673)
    );
    assert_eq!(
        (o.producers, o.consumers, o.size, o.autoack),
        (1, 1, 12, true)
    );
    assert_eq!(o.time, Some(Duration::from_secs(10)));
    assert_eq!(
        (o.exchange.as_str(), o.exchange_type.as_str()),
        ("direct", "direct")
    );
    assert_eq!(
        (o.confirm, o.rate, o.mode.clone()),
        (None, None, Mode::Load)
    );
    assert!(o.id.starts_with("test-"), "{}", o.id);
}

#[test]
fn workload_w1x10_durable_queues_with_confirms() {
    let o = parse(
        "-h amqp://h -x 10 -y 10 --queue-pattern perf-test-%d --queue-pattern-from 1 \
         --queue-pattern-to 10 -s 12 --flag persistent --flag mandatory --auto-delete false \
         --confirm 192 --qos 200 --multi-ack-every 200 -z 30 --id w1x10",
    );
    assert_eq!(
        (o.persistent, o.mandatory, o.auto_delete),
        (true, true, false)
    );
    assert_eq!((o.confirm, o.qos, o.multi_ack_every), (Some(192), 200, 200));
    let pattern = QueuePattern {
        pattern: "perf-test-%d".into(),
        from: 1,
        to: 10,
    };
    assert_eq!(o.queue_pattern, Some(pattern));
    assert_eq!(o.id, "w1x10");
}

#[test]
fn short_forms_fixed_rate_and_arguments() {
    let o = parse(
        "-h amqp://h -x2 -X 3 -Y 2 -y 4 -r 500.5 -R 100 -C 1000 -D 2000 -u q -e ex -t fanout \
         -k key -c 10 -q 50 -qa x-max-length=10,x-queue-type=quorum -ca x-priority=5 -p -b 30",
    );
    assert_eq!(
        (
            o.producers,
            o.producer_channels,
            o.consumers,
            o.consumer_channels
        ),
        (2, 3, 4, 2)
    );
    assert_eq!((o.rate, o.consumer_rate), (Some(500.5), Some(100.0)));
    assert_eq!((o.producer_messages, o.consumer_messages), (1000, 2000));
    assert_eq!(
        (
            o.queue.as_deref(),
            o.exchange.as_str(),
            o.exchange_type.as_str()
        ),
        (Some("q"), "ex", "fanout")
    );
    assert_eq!(
        (o.routing_key.as_deref(), o.confirm, o.qos),
        (Some("key"), Some(10), 50)
    );
    assert_eq!(
        o.queue_args,
        vec![
            ("x-max-length".to_string(), ArgValue::Int(10)),
            ("x-queue-type".to_string(), ArgValue::Text("quorum".into())),
        ]
    );
    assert_eq!(
        o.consumer_args,
        vec![("x-priority".to_string(), ArgValue::Int(5))]
    );
    assert!(o.predeclared);
    assert_eq!(o.heartbeat, 30);
    assert_eq!(o.producer_agents(), 6);
}

#[test]
fn sweep_and_connections_modes() {
    let o = parse("-x 1 -y 1 -a --sweep --sweep-step-seconds 3");
    assert_eq!(
        o.mode,
        Mode::Sweep {
            step: Duration::from_secs(3)
        }
    );
    let o = parse("--connections 1000");
    assert_eq!(
        o.mode,
        Mode::Connections {
            count: 1000,
            source_addresses: None
        }
    );
    assert_eq!(
        o.run_time(),
        Duration::from_secs(60),
        "idle connections hold 60 s by default"
    );
    let o = parse("--connections 10 -z 5");
    assert_eq!(o.run_time(), Duration::from_secs(5));
    let o = parse("--connections 40000 --source-addresses 4");
    assert_eq!(
        o.mode,
        Mode::Connections {
            count: 40000,
            source_addresses: Some(4)
        }
    );
    let o = parse("-x 1 -y 1");
    assert_eq!(
        o.run_time(),
        Duration::from_secs(3600),
        "no -z: the hard cap"
    );
}

#[test]
fn mistakes_are_refused_with_the_flag_name() {
    assert!(refused(&["--source-addresses", "2"]).contains("goes with --connections"));
    assert!(refused(&["--connections", "9", "--source-addresses", "254"]).contains("at most 253"));
    assert!(refused(&["--producers", "many"]).contains("-x/--producers: 'many'"));
    assert!(refused(&["-f", "transient"]).contains("-f/--flag 'transient'"));
    assert!(refused(&["--queue-pattern", "q"]).contains("has no %d"));
    assert!(refused(&["--queue-pattern", "q-%d"]).contains("needs --queue-pattern-to"));
    assert!(refused(&[
        "-u",
        "a",
        "--queue-pattern",
        "q-%d",
        "--queue-pattern-to",
        "2"
    ])
    .contains("give one"));
    assert!(refused(&["--sweep", "-r", "100"]).contains("drop -r and -z"));
    assert!(refused(&["-ad", "maybe"]).contains("neither true nor false"));
    assert!(refused(&["-qa", "novalue"]).contains("'novalue' is not KEY=VALUE"));
    assert!(refused(&["-h", "http://x"]).contains("unknown scheme 'http'"));
    assert!(refused(&["--bogus"]).contains("unknown flag '--bogus'"));
    assert!(refused(&["-e", ""]).contains("-e ''"));
    assert!(warren_perf::parse(vec!["--help".into()]).unwrap().is_none());
}

#[test]
fn verify_order_needs_one_consumer_per_queue_and_a_producer_id() {
    let o = parse("-x 2 -y 1 -u q -s 16 --verify-order");
    assert!(o.verify_order);
    assert!(!parse("-x 1 -y 1").verify_order);
    let text = refused(&["-y", "2", "-u", "q", "--verify-order"]);
    assert!(
        text.contains("--verify-order needs one consumer channel per queue"),
        "{text}"
    );
    let text = refused(&["-x", "2", "-u", "q", "--verify-order"]);
    assert!(text.contains("needs -s 16 or more"), "{text}");
    // server-named queues: each consumer channel has its own, which gets every message
    assert!(parse("-x 1 -y 3 --verify-order").verify_order);
    let warnings = parse("-x 1 -y 0 -u q --verify-order").warnings();
    assert!(warnings
        .iter()
        .any(|w| w.contains("with -y 0 it does nothing")));
}

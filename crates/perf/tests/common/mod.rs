//! The broker the perf tests drive: a Warren started in the test's own process, listening for
//! AMQP on a loopback port of its own (no management or Prometheus listener), with its data in
//! a temporary folder that is removed with it.

use std::time::Duration;

pub struct Broker {
    pub running: warren_server::RunningBroker,
    _data_dir: tempfile::TempDir,
}

impl Broker {
    /// Starts a broker whose data folder's name begins with `prefix`; it must be up in 10 s.
    pub async fn start(prefix: &str) -> Broker {
        let data_dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
        let config = warren_server::Config {
            management_port: None,
            prometheus_port: None,
            amqp_port: 0,
            // The stream listener would take 5552, which parallel tests share.
            stream_port: 0,
            bind_address: [127, 0, 0, 1].into(),
            data_dir: data_dir.path().to_path_buf(),
            ..Default::default()
        };
        let running = tokio::time::timeout(Duration::from_secs(10), warren_server::start(config))
            .await
            .unwrap()
            .unwrap();
        Broker {
            running,
            _data_dir: data_dir,
        }
    }
}

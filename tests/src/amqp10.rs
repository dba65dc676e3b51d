//! AMQP 1.0 helpers: fe2o3-amqp connections to the broker under test (SASL PLAIN as guest).

use fe2o3_amqp::{Connection, Session};

use crate::{bounded, TestBroker};

impl TestBroker {
    /// The AMQP 1.0 URL (guest:guest; fe2o3-amqp uses SASL PLAIN with it).
    pub fn amqp10_url(&self) -> String {
        format!("amqp://guest:guest@{}", self.addr())
    }

    /// An AMQP 1.0 connection with one session.
    pub async fn amqp10(
        &self,
    ) -> (
        fe2o3_amqp::connection::ConnectionHandle<()>,
        fe2o3_amqp::session::SessionHandle<()>,
    ) {
        let url = self.amqp10_url();
        let mut connection = bounded!(Connection::open(crate::unique("amqp10-test"), url.as_str()))
            .expect("AMQP 1.0 connection opens");
        let session = bounded!(Session::begin(&mut connection)).expect("session begins");
        (connection, session)
    }
}

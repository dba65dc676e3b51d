//! The SASL performatives (security.xml): mechanisms, init, challenge, response, outcome.

use bytes::Bytes;

use super::error::DecodeError;
use super::fields::{composite, symbols, Fields};
use super::performative::descriptor_code;
use super::types::Value;

pub mod code {
    pub const MECHANISMS: u64 = 0x40;
    pub const INIT: u64 = 0x41;
    pub const CHALLENGE: u64 = 0x42;
    pub const RESPONSE: u64 = 0x43;
    pub const OUTCOME: u64 = 0x44;
}

const NAMES: [(&str, u64); 5] = [
    ("amqp:sasl-mechanisms:list", code::MECHANISMS),
    ("amqp:sasl-init:list", code::INIT),
    ("amqp:sasl-challenge:list", code::CHALLENGE),
    ("amqp:sasl-response:list", code::RESPONSE),
    ("amqp:sasl-outcome:list", code::OUTCOME),
];

#[derive(Debug, Clone, PartialEq)]
pub enum SaslFrame {
    Mechanisms(Vec<String>),
    Init {
        mechanism: String,
        initial_response: Option<Bytes>,
        hostname: Option<String>,
    },
    Challenge(Bytes),
    Response(Bytes),
    Outcome {
        code: u8,
        additional_data: Option<Bytes>,
    },
}

impl SaslFrame {
    pub fn from_value(value: Value) -> Result<SaslFrame, DecodeError> {
        let Value::Described(descriptor, body) = value else {
            return Err(DecodeError::UnknownPerformative {
                descriptor: "(not a described type)".into(),
            });
        };
        let code = descriptor_code(&descriptor, &NAMES)?;
        let mut f = Fields::new("sasl", *body)?;
        let missing = |field| DecodeError::BadField {
            context: "sasl",
            field,
            problem: "mandatory field is missing",
        };
        Ok(match code {
            code::MECHANISMS => SaslFrame::Mechanisms(f.symbols("sasl-server-mechanisms")?),
            code::INIT => SaslFrame::Init {
                mechanism: f.required_string("mechanism")?,
                initial_response: f.binary("initial-response")?,
                hostname: f.string("hostname")?,
            },
            code::CHALLENGE => {
                SaslFrame::Challenge(f.binary("challenge")?.ok_or_else(|| missing("challenge"))?)
            }
            code::RESPONSE => {
                SaslFrame::Response(f.binary("response")?.ok_or_else(|| missing("response"))?)
            }
            code::OUTCOME => SaslFrame::Outcome {
                code: f.u8("code")?.ok_or_else(|| missing("code"))?,
                additional_data: f.binary("additional-data")?,
            },
            other => {
                return Err(DecodeError::UnknownPerformative {
                    descriptor: format!("0x{other:x}"),
                })
            }
        })
    }

    pub fn to_value(&self) -> Value {
        let binary = |b: &Option<Bytes>| b.clone().map_or(Value::Null, Value::Binary);
        match self {
            SaslFrame::Mechanisms(names) => {
                // Mandatory: an empty list is still an array.
                let value = match symbols(names) {
                    Value::Null => Value::Array(Vec::new()),
                    v => v,
                };
                composite(code::MECHANISMS, vec![value])
            }
            SaslFrame::Init {
                mechanism,
                initial_response,
                hostname,
            } => composite(
                code::INIT,
                vec![
                    Value::symbol(mechanism),
                    binary(initial_response),
                    hostname.as_deref().map_or(Value::Null, Value::string),
                ],
            ),
            SaslFrame::Challenge(b) => composite(code::CHALLENGE, vec![Value::Binary(b.clone())]),
            SaslFrame::Response(b) => composite(code::RESPONSE, vec![Value::Binary(b.clone())]),
            SaslFrame::Outcome {
                code,
                additional_data,
            } => composite(
                code::OUTCOME,
                vec![Value::Ubyte(*code), binary(additional_data)],
            ),
        }
    }
}

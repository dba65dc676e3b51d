//! Reply codes, generated from the spec's constants: every constant with a `class` (soft errors
//! close the channel, hard errors the connection) plus `REPLY_SUCCESS`.

include!(concat!(env!("OUT_DIR"), "/amqp091_reply_code.rs"));

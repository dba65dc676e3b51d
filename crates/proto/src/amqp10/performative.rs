//! The nine AMQP performatives (transport.xml), the error type, terminuses (source and
//! target) and delivery states (messaging.xml). Each decodes from the fields of its described
//! list and encodes back to one.

use bytes::Bytes;

use super::error::DecodeError;
use super::fields::{composite, opt_map, opt_string, opt_uint, symbols, Fields};
use super::types::Value;

pub mod code {
    pub const OPEN: u64 = 0x10;
    pub const BEGIN: u64 = 0x11;
    pub const ATTACH: u64 = 0x12;
    pub const FLOW: u64 = 0x13;
    pub const TRANSFER: u64 = 0x14;
    pub const DISPOSITION: u64 = 0x15;
    pub const DETACH: u64 = 0x16;
    pub const END: u64 = 0x17;
    pub const CLOSE: u64 = 0x18;
    pub const ERROR: u64 = 0x1d;
    pub const RECEIVED: u64 = 0x23;
    pub const ACCEPTED: u64 = 0x24;
    pub const REJECTED: u64 = 0x25;
    pub const RELEASED: u64 = 0x26;
    pub const MODIFIED: u64 = 0x27;
    pub const SOURCE: u64 = 0x28;
    pub const TARGET: u64 = 0x29;
    /// The transaction coordinator target (transactions.xml).
    pub const COORDINATOR: u64 = 0x30;
}

/// Map type of `properties` and annotation fields.
pub type FieldsMap = Vec<(Value, Value)>;

/// `role` of attach and disposition: false is sender, true is receiver.
pub const ROLE_SENDER: bool = false;
pub const ROLE_RECEIVER: bool = true;

/// Sender settle modes.
pub const SND_UNSETTLED: u8 = 0;
pub const SND_SETTLED: u8 = 1;
pub const SND_MIXED: u8 = 2;

#[derive(Debug, Clone, PartialEq)]
pub enum Performative {
    /// Boxed (as attach): rare and large, while transfers are small and many.
    Open(Box<Open>),
    Begin(Begin),
    Attach(Box<Attach>),
    Flow(Flow),
    Transfer(Transfer),
    Disposition(Disposition),
    Detach(Detach),
    End(End),
    Close(Close),
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Open {
    pub container_id: String,
    pub hostname: Option<String>,
    /// Default 4294967295.
    pub max_frame_size: Option<u32>,
    /// Default 65535.
    pub channel_max: Option<u16>,
    /// Milliseconds.
    pub idle_time_out: Option<u32>,
    pub offered_capabilities: Vec<String>,
    pub desired_capabilities: Vec<String>,
    pub properties: Option<FieldsMap>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Begin {
    pub remote_channel: Option<u16>,
    pub next_outgoing_id: u32,
    pub incoming_window: u32,
    pub outgoing_window: u32,
    pub handle_max: Option<u32>,
    pub offered_capabilities: Vec<String>,
    pub desired_capabilities: Vec<String>,
    pub properties: Option<FieldsMap>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Attach {
    pub name: String,
    pub handle: u32,
    pub role: bool,
    pub snd_settle_mode: Option<u8>,
    pub rcv_settle_mode: Option<u8>,
    pub source: Option<Terminus>,
    pub target: Option<Terminus>,
    pub unsettled: Option<FieldsMap>,
    pub incomplete_unsettled: bool,
    pub initial_delivery_count: Option<u32>,
    pub max_message_size: Option<u64>,
    pub offered_capabilities: Vec<String>,
    pub desired_capabilities: Vec<String>,
    pub properties: Option<FieldsMap>,
}

/// A source or target; the fields besides the address are kept as received so that the
/// attach reply can echo them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Terminus {
    pub address: Option<String>,
    pub durable: Option<u32>,
    pub dynamic: bool,
    /// Every field after the address, as received (nulls included).
    pub rest: Vec<Value>,
    /// A transaction coordinator rather than a target (its fields are not kept).
    pub coordinator: bool,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Flow {
    pub next_incoming_id: Option<u32>,
    pub incoming_window: u32,
    pub next_outgoing_id: u32,
    pub outgoing_window: u32,
    pub handle: Option<u32>,
    pub delivery_count: Option<u32>,
    pub link_credit: Option<u32>,
    pub available: Option<u32>,
    pub drain: bool,
    pub echo: bool,
    pub properties: Option<FieldsMap>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Transfer {
    pub handle: u32,
    pub delivery_id: Option<u32>,
    pub delivery_tag: Option<Bytes>,
    pub message_format: Option<u32>,
    pub settled: Option<bool>,
    pub more: bool,
    pub rcv_settle_mode: Option<u8>,
    pub state: Option<DeliveryState>,
    pub resume: bool,
    pub aborted: bool,
    pub batchable: bool,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Disposition {
    pub role: bool,
    pub first: u32,
    pub last: Option<u32>,
    pub settled: bool,
    pub state: Option<DeliveryState>,
    pub batchable: bool,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Detach {
    pub handle: u32,
    pub closed: bool,
    pub error: Option<AmqpError>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct End {
    pub error: Option<AmqpError>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Close {
    pub error: Option<AmqpError>,
}

/// The `error` composite: a condition symbol and a description.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AmqpError {
    pub condition: String,
    pub description: Option<String>,
    pub info: Option<FieldsMap>,
}

impl AmqpError {
    pub fn new(condition: &str, description: impl Into<String>) -> AmqpError {
        AmqpError {
            condition: condition.to_owned(),
            description: Some(description.into()),
            info: None,
        }
    }
}

/// Delivery states: the outcomes and `received`.
#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryState {
    Received {
        section_number: u32,
        section_offset: u64,
    },
    Accepted,
    Rejected {
        error: Option<AmqpError>,
    },
    Released,
    Modified {
        delivery_failed: bool,
        undeliverable_here: bool,
        message_annotations: Option<FieldsMap>,
    },
}

impl Performative {
    /// Decodes a performative from its described value.
    pub fn from_value(value: Value) -> Result<Performative, DecodeError> {
        let Value::Described(descriptor, body) = value else {
            return Err(DecodeError::UnknownPerformative {
                descriptor: "(not a described type)".into(),
            });
        };
        let code = descriptor_code(&descriptor, &PERFORMATIVE_NAMES)?;
        Ok(match code {
            code::OPEN => Performative::Open(Box::new(Open::decode(Fields::new("open", *body)?)?)),
            code::BEGIN => Performative::Begin(Begin::decode(Fields::new("begin", *body)?)?),
            code::ATTACH => {
                Performative::Attach(Box::new(Attach::decode(Fields::new("attach", *body)?)?))
            }
            code::FLOW => Performative::Flow(Flow::decode(Fields::new("flow", *body)?)?),
            code::TRANSFER => {
                Performative::Transfer(Transfer::decode(Fields::new("transfer", *body)?)?)
            }
            code::DISPOSITION => {
                Performative::Disposition(Disposition::decode(Fields::new("disposition", *body)?)?)
            }
            code::DETACH => Performative::Detach(Detach::decode(Fields::new("detach", *body)?)?),
            code::END => Performative::End(End {
                error: error_field(&mut Fields::new("end", *body)?)?,
            }),
            code::CLOSE => Performative::Close(Close {
                error: error_field(&mut Fields::new("close", *body)?)?,
            }),
            other => {
                return Err(DecodeError::UnknownPerformative {
                    descriptor: format!("0x{other:x}"),
                })
            }
        })
    }

    pub fn to_value(&self) -> Value {
        match self {
            Performative::Open(p) => p.to_value(),
            Performative::Begin(p) => p.to_value(),
            Performative::Attach(p) => p.to_value(),
            Performative::Flow(p) => p.to_value(),
            Performative::Transfer(p) => p.to_value(),
            Performative::Disposition(p) => p.to_value(),
            Performative::Detach(p) => composite(
                code::DETACH,
                vec![
                    Value::Uint(p.handle),
                    Value::Bool(p.closed),
                    error_value(&p.error),
                ],
            ),
            Performative::End(p) => composite(code::END, vec![error_value(&p.error)]),
            Performative::Close(p) => composite(code::CLOSE, vec![error_value(&p.error)]),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Performative::Open(_) => "open",
            Performative::Begin(_) => "begin",
            Performative::Attach(_) => "attach",
            Performative::Flow(_) => "flow",
            Performative::Transfer(_) => "transfer",
            Performative::Disposition(_) => "disposition",
            Performative::Detach(_) => "detach",
            Performative::End(_) => "end",
            Performative::Close(_) => "close",
        }
    }
}

const PERFORMATIVE_NAMES: [(&str, u64); 9] = [
    ("amqp:open:list", code::OPEN),
    ("amqp:begin:list", code::BEGIN),
    ("amqp:attach:list", code::ATTACH),
    ("amqp:flow:list", code::FLOW),
    ("amqp:transfer:list", code::TRANSFER),
    ("amqp:disposition:list", code::DISPOSITION),
    ("amqp:detach:list", code::DETACH),
    ("amqp:end:list", code::END),
    ("amqp:close:list", code::CLOSE),
];

const COMPOSITE_NAMES: [(&str, u64); 10] = [
    ("amqp:coordinator:list", code::COORDINATOR),
    ("amqp:error:list", code::ERROR),
    ("amqp:received:list", code::RECEIVED),
    ("amqp:accepted:list", code::ACCEPTED),
    ("amqp:rejected:list", code::REJECTED),
    ("amqp:released:list", code::RELEASED),
    ("amqp:modified:list", code::MODIFIED),
    ("amqp:source:list", code::SOURCE),
    ("amqp:target:list", code::TARGET),
    ("amqp:error:list", code::ERROR),
];

/// The numeric code of a descriptor, which may also be the composite's symbolic name.
pub(crate) fn descriptor_code(
    descriptor: &Value,
    names: &[(&str, u64)],
) -> Result<u64, DecodeError> {
    if let Some(code) = descriptor.as_u64() {
        return Ok(code);
    }
    if let Value::Symbol(name) = descriptor {
        if let Some((_, code)) = names.iter().find(|(n, _)| n.as_bytes() == name.as_ref()) {
            return Ok(*code);
        }
    }
    Err(DecodeError::UnknownPerformative {
        descriptor: format!("{descriptor:?}"),
    })
}

impl Open {
    fn decode(mut f: Fields) -> Result<Open, DecodeError> {
        let open = Open {
            container_id: f.required_string("container-id")?,
            hostname: f.string("hostname")?,
            max_frame_size: f.u32("max-frame-size")?,
            channel_max: f.u16("channel-max")?,
            idle_time_out: f.u32("idle-time-out")?,
            offered_capabilities: {
                let _outgoing_locales = f.value();
                let _incoming_locales = f.value();
                f.symbols("offered-capabilities")?
            },
            desired_capabilities: f.symbols("desired-capabilities")?,
            properties: f.map("properties")?,
        };
        Ok(open)
    }

    pub fn to_value(&self) -> Value {
        composite(
            code::OPEN,
            vec![
                Value::string(&self.container_id),
                opt_string(&self.hostname),
                opt_uint(self.max_frame_size),
                self.channel_max.map_or(Value::Null, Value::Ushort),
                opt_uint(self.idle_time_out),
                Value::Null,
                Value::Null,
                symbols(&self.offered_capabilities),
                symbols(&self.desired_capabilities),
                opt_map(&self.properties),
            ],
        )
    }
}

impl Begin {
    fn decode(mut f: Fields) -> Result<Begin, DecodeError> {
        Ok(Begin {
            remote_channel: f.u16("remote-channel")?,
            next_outgoing_id: f.required_u32("next-outgoing-id")?,
            incoming_window: f.required_u32("incoming-window")?,
            outgoing_window: f.required_u32("outgoing-window")?,
            handle_max: f.u32("handle-max")?,
            offered_capabilities: f.symbols("offered-capabilities")?,
            desired_capabilities: f.symbols("desired-capabilities")?,
            properties: f.map("properties")?,
        })
    }

    pub fn to_value(&self) -> Value {
        composite(
            code::BEGIN,
            vec![
                self.remote_channel.map_or(Value::Null, Value::Ushort),
                Value::Uint(self.next_outgoing_id),
                Value::Uint(self.incoming_window),
                Value::Uint(self.outgoing_window),
                opt_uint(self.handle_max),
                symbols(&self.offered_capabilities),
                symbols(&self.desired_capabilities),
                opt_map(&self.properties),
            ],
        )
    }
}

impl Attach {
    fn decode(mut f: Fields) -> Result<Attach, DecodeError> {
        Ok(Attach {
            name: f.required_string("name")?,
            handle: f.required_u32("handle")?,
            role: f.required_bool("role")?,
            snd_settle_mode: f.u8("snd-settle-mode")?,
            rcv_settle_mode: f.u8("rcv-settle-mode")?,
            source: terminus_field(&mut f, "source", code::SOURCE)?,
            target: terminus_field(&mut f, "target", code::TARGET)?,
            unsettled: f.map("unsettled")?,
            incomplete_unsettled: f.bool("incomplete-unsettled")?.unwrap_or(false),
            initial_delivery_count: f.u32("initial-delivery-count")?,
            max_message_size: f.u64("max-message-size")?,
            offered_capabilities: f.symbols("offered-capabilities")?,
            desired_capabilities: f.symbols("desired-capabilities")?,
            properties: f.map("properties")?,
        })
    }

    pub fn to_value(&self) -> Value {
        composite(
            code::ATTACH,
            vec![
                Value::string(&self.name),
                Value::Uint(self.handle),
                Value::Bool(self.role),
                self.snd_settle_mode.map_or(Value::Null, Value::Ubyte),
                self.rcv_settle_mode.map_or(Value::Null, Value::Ubyte),
                terminus_value(&self.source, code::SOURCE),
                terminus_value(&self.target, code::TARGET),
                opt_map(&self.unsettled),
                if self.incomplete_unsettled {
                    Value::Bool(true)
                } else {
                    Value::Null
                },
                opt_uint(self.initial_delivery_count),
                self.max_message_size.map_or(Value::Null, Value::Ulong),
                symbols(&self.offered_capabilities),
                symbols(&self.desired_capabilities),
                opt_map(&self.properties),
            ],
        )
    }
}

fn terminus_field(
    f: &mut Fields,
    field: &'static str,
    expected: u64,
) -> Result<Option<Terminus>, DecodeError> {
    let bad = |problem| DecodeError::BadField {
        context: "attach",
        field,
        problem,
    };
    let Some(value) = f.value() else {
        return Ok(None);
    };
    let Value::Described(descriptor, body) = value else {
        return Err(bad("expected a described source or target"));
    };
    let code = descriptor_code(&descriptor, &COMPOSITE_NAMES).ok();
    if expected == code::TARGET && code == Some(code::COORDINATOR) {
        // Valid, and refused by the broker as a link error (no transactions).
        return Ok(Some(Terminus {
            coordinator: true,
            ..Terminus::default()
        }));
    }
    if code != Some(expected) {
        return Err(bad("unknown terminus type"));
    }
    let mut fields = Fields::new(field, *body)?;
    let address = match fields.value() {
        None => None,
        Some(v) => Some(
            v.as_str()
                .ok_or_else(|| bad("address must be a string"))?
                .to_owned(),
        ),
    };
    let rest: Vec<Value> = std::iter::from_fn(|| fields.next_raw()).collect();
    let durable = rest.first().and_then(Value::as_u32);
    let dynamic = rest.get(3).and_then(Value::as_bool).unwrap_or(false);
    Ok(Some(Terminus {
        address,
        durable,
        dynamic,
        rest,
        coordinator: false,
    }))
}

fn terminus_value(terminus: &Option<Terminus>, code: u64) -> Value {
    let Some(t) = terminus else {
        return Value::Null;
    };
    let mut fields = vec![opt_string(&t.address)];
    fields.extend(t.rest.iter().cloned());
    composite(code, fields)
}

impl Flow {
    fn decode(mut f: Fields) -> Result<Flow, DecodeError> {
        Ok(Flow {
            next_incoming_id: f.u32("next-incoming-id")?,
            incoming_window: f.required_u32("incoming-window")?,
            next_outgoing_id: f.required_u32("next-outgoing-id")?,
            outgoing_window: f.required_u32("outgoing-window")?,
            handle: f.u32("handle")?,
            delivery_count: f.u32("delivery-count")?,
            link_credit: f.u32("link-credit")?,
            available: f.u32("available")?,
            drain: f.bool("drain")?.unwrap_or(false),
            echo: f.bool("echo")?.unwrap_or(false),
            properties: f.map("properties")?,
        })
    }

    pub fn to_value(&self) -> Value {
        composite(
            code::FLOW,
            vec![
                opt_uint(self.next_incoming_id),
                Value::Uint(self.incoming_window),
                Value::Uint(self.next_outgoing_id),
                Value::Uint(self.outgoing_window),
                opt_uint(self.handle),
                opt_uint(self.delivery_count),
                opt_uint(self.link_credit),
                opt_uint(self.available),
                Value::Bool(self.drain),
                Value::Bool(self.echo),
                opt_map(&self.properties),
            ],
        )
    }
}

impl Transfer {
    fn decode(mut f: Fields) -> Result<Transfer, DecodeError> {
        Ok(Transfer {
            handle: f.required_u32("handle")?,
            delivery_id: f.u32("delivery-id")?,
            delivery_tag: f.binary("delivery-tag")?,
            message_format: f.u32("message-format")?,
            settled: f.bool("settled")?,
            more: f.bool("more")?.unwrap_or(false),
            rcv_settle_mode: f.u8("rcv-settle-mode")?,
            state: state_field(&mut f)?,
            resume: f.bool("resume")?.unwrap_or(false),
            aborted: f.bool("aborted")?.unwrap_or(false),
            batchable: f.bool("batchable")?.unwrap_or(false),
        })
    }

    pub fn to_value(&self) -> Value {
        composite(
            code::TRANSFER,
            vec![
                Value::Uint(self.handle),
                opt_uint(self.delivery_id),
                self.delivery_tag.clone().map_or(Value::Null, Value::Binary),
                opt_uint(self.message_format),
                self.settled.map_or(Value::Null, Value::Bool),
                if self.more {
                    Value::Bool(true)
                } else {
                    Value::Null
                },
                self.rcv_settle_mode.map_or(Value::Null, Value::Ubyte),
                state_value(&self.state),
                if self.resume {
                    Value::Bool(true)
                } else {
                    Value::Null
                },
                if self.aborted {
                    Value::Bool(true)
                } else {
                    Value::Null
                },
                if self.batchable {
                    Value::Bool(true)
                } else {
                    Value::Null
                },
            ],
        )
    }
}

impl Disposition {
    fn decode(mut f: Fields) -> Result<Disposition, DecodeError> {
        Ok(Disposition {
            role: f.required_bool("role")?,
            first: f.required_u32("first")?,
            last: f.u32("last")?,
            settled: f.bool("settled")?.unwrap_or(false),
            state: state_field(&mut f)?,
            batchable: f.bool("batchable")?.unwrap_or(false),
        })
    }

    pub fn to_value(&self) -> Value {
        composite(
            code::DISPOSITION,
            vec![
                Value::Bool(self.role),
                Value::Uint(self.first),
                opt_uint(self.last),
                Value::Bool(self.settled),
                state_value(&self.state),
                if self.batchable {
                    Value::Bool(true)
                } else {
                    Value::Null
                },
            ],
        )
    }
}

impl Detach {
    fn decode(mut f: Fields) -> Result<Detach, DecodeError> {
        Ok(Detach {
            handle: f.required_u32("handle")?,
            closed: f.bool("closed")?.unwrap_or(false),
            error: error_field(&mut f)?,
        })
    }
}

fn error_field(f: &mut Fields) -> Result<Option<AmqpError>, DecodeError> {
    match f.value() {
        None => Ok(None),
        Some(value) => AmqpError::from_value(value).map(Some),
    }
}

impl AmqpError {
    pub fn from_value(value: Value) -> Result<AmqpError, DecodeError> {
        let bad = DecodeError::BadField {
            context: "error",
            field: "(descriptor)",
            problem: "expected an amqp:error:list",
        };
        let Value::Described(descriptor, body) = value else {
            return Err(bad);
        };
        if descriptor_code(&descriptor, &COMPOSITE_NAMES).ok() != Some(code::ERROR) {
            return Err(bad);
        }
        let mut f = Fields::new("error", *body)?;
        Ok(AmqpError {
            condition: f.required_string("condition")?,
            description: f.string("description")?,
            info: f.map("info")?,
        })
    }

    pub fn to_value(&self) -> Value {
        composite(
            code::ERROR,
            vec![
                Value::symbol(&self.condition),
                opt_string(&self.description),
                opt_map(&self.info),
            ],
        )
    }
}

fn error_value(error: &Option<AmqpError>) -> Value {
    error.as_ref().map_or(Value::Null, AmqpError::to_value)
}

fn state_field(f: &mut Fields) -> Result<Option<DeliveryState>, DecodeError> {
    match f.value() {
        None => Ok(None),
        Some(value) => DeliveryState::from_value(value).map(Some),
    }
}

fn state_value(state: &Option<DeliveryState>) -> Value {
    state.as_ref().map_or(Value::Null, DeliveryState::to_value)
}

impl DeliveryState {
    pub fn from_value(value: Value) -> Result<DeliveryState, DecodeError> {
        let bad = |problem| DecodeError::BadField {
            context: "delivery-state",
            field: "(descriptor)",
            problem,
        };
        let Value::Described(descriptor, body) = value else {
            return Err(bad("expected a described delivery state"));
        };
        let code = descriptor_code(&descriptor, &COMPOSITE_NAMES)
            .map_err(|_| bad("unknown delivery state"))?;
        let mut f = Fields::new("delivery-state", *body)?;
        Ok(match code {
            code::RECEIVED => DeliveryState::Received {
                section_number: f.required_u32("section-number")?,
                section_offset: f.u64("section-offset")?.unwrap_or(0),
            },
            code::ACCEPTED => DeliveryState::Accepted,
            code::REJECTED => DeliveryState::Rejected {
                error: error_field(&mut f)?,
            },
            code::RELEASED => DeliveryState::Released,
            code::MODIFIED => DeliveryState::Modified {
                delivery_failed: f.bool("delivery-failed")?.unwrap_or(false),
                undeliverable_here: f.bool("undeliverable-here")?.unwrap_or(false),
                message_annotations: f.map("message-annotations")?,
            },
            _ => return Err(bad("unknown delivery state")),
        })
    }

    pub fn to_value(&self) -> Value {
        match self {
            DeliveryState::Received {
                section_number,
                section_offset,
            } => composite(
                code::RECEIVED,
                vec![Value::Uint(*section_number), Value::Ulong(*section_offset)],
            ),
            DeliveryState::Accepted => composite(code::ACCEPTED, Vec::new()),
            DeliveryState::Rejected { error } => {
                composite(code::REJECTED, vec![error_value(error)])
            }
            DeliveryState::Released => composite(code::RELEASED, Vec::new()),
            DeliveryState::Modified {
                delivery_failed,
                undeliverable_here,
                message_annotations,
            } => composite(
                code::MODIFIED,
                vec![
                    Value::Bool(*delivery_failed),
                    Value::Bool(*undeliverable_here),
                    opt_map(message_annotations),
                ],
            ),
        }
    }
}

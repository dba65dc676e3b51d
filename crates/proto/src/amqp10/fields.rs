//! Positional fields of a described list (performatives, terminuses, outcomes, sections):
//! reading them with their type checked and defaults applied, and writing them back with the
//! trailing nulls left out, as the spec allows.

use bytes::Bytes;

use super::error::DecodeError;
use super::types::Value;

/// The fields of one composite value, read in order.
pub struct Fields {
    context: &'static str,
    items: std::vec::IntoIter<Value>,
}

impl Fields {
    /// The fields of `value`, which must be a list (a described composite's value).
    pub fn new(context: &'static str, value: Value) -> Result<Fields, DecodeError> {
        match value {
            Value::List(items) => Ok(Fields {
                context,
                items: items.into_iter(),
            }),
            _ => Err(DecodeError::BadField {
                context,
                field: "(fields)",
                problem: "expected a list of fields",
            }),
        }
    }

    fn bad(&self, field: &'static str, problem: &'static str) -> DecodeError {
        DecodeError::BadField {
            context: self.context,
            field,
            problem,
        }
    }

    /// The next field as it is, nulls included; `None` past the last.
    pub fn next_raw(&mut self) -> Option<Value> {
        self.items.next()
    }

    /// The next field, `None` when absent or null.
    pub fn value(&mut self) -> Option<Value> {
        self.items.next().filter(|v| !v.is_null())
    }

    pub fn u32(&mut self, field: &'static str) -> Result<Option<u32>, DecodeError> {
        match self.value() {
            None => Ok(None),
            Some(Value::Uint(v)) => Ok(Some(v)),
            Some(Value::Ushort(v)) => Ok(Some(u32::from(v))),
            Some(Value::Ubyte(v)) => Ok(Some(u32::from(v))),
            Some(_) => Err(self.bad(field, "expected a uint")),
        }
    }

    pub fn required_u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        self.u32(field)?
            .ok_or_else(|| self.bad(field, "mandatory field is missing"))
    }

    pub fn u64(&mut self, field: &'static str) -> Result<Option<u64>, DecodeError> {
        match self.value() {
            None => Ok(None),
            Some(v @ (Value::Ulong(_) | Value::Uint(_) | Value::Ushort(_) | Value::Ubyte(_))) => {
                Ok(v.as_u64())
            }
            Some(_) => Err(self.bad(field, "expected a ulong")),
        }
    }

    pub fn u16(&mut self, field: &'static str) -> Result<Option<u16>, DecodeError> {
        match self.value() {
            None => Ok(None),
            Some(Value::Ushort(v)) => Ok(Some(v)),
            Some(Value::Ubyte(v)) => Ok(Some(u16::from(v))),
            Some(_) => Err(self.bad(field, "expected a ushort")),
        }
    }

    pub fn u8(&mut self, field: &'static str) -> Result<Option<u8>, DecodeError> {
        match self.value() {
            None => Ok(None),
            Some(Value::Ubyte(v)) => Ok(Some(v)),
            Some(_) => Err(self.bad(field, "expected a ubyte")),
        }
    }

    pub fn bool(&mut self, field: &'static str) -> Result<Option<bool>, DecodeError> {
        match self.value() {
            None => Ok(None),
            Some(Value::Bool(v)) => Ok(Some(v)),
            Some(_) => Err(self.bad(field, "expected a boolean")),
        }
    }

    pub fn required_bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        self.bool(field)?
            .ok_or_else(|| self.bad(field, "mandatory field is missing"))
    }

    /// A string (symbols are accepted too: several clients send either).
    pub fn string(&mut self, field: &'static str) -> Result<Option<String>, DecodeError> {
        match self.value() {
            None => Ok(None),
            Some(v @ (Value::String(_) | Value::Symbol(_))) => Ok(v.as_str().map(str::to_owned)),
            Some(_) => Err(self.bad(field, "expected a string")),
        }
    }

    pub fn required_string(&mut self, field: &'static str) -> Result<String, DecodeError> {
        self.string(field)?
            .ok_or_else(|| self.bad(field, "mandatory field is missing"))
    }

    pub fn binary(&mut self, field: &'static str) -> Result<Option<Bytes>, DecodeError> {
        match self.value() {
            None => Ok(None),
            Some(Value::Binary(b)) => Ok(Some(b)),
            Some(_) => Err(self.bad(field, "expected a binary")),
        }
    }

    /// A `multiple="true"` symbol field: one symbol or an array of them.
    pub fn symbols(&mut self, field: &'static str) -> Result<Vec<String>, DecodeError> {
        match self.value() {
            None => Ok(Vec::new()),
            Some(Value::Symbol(s)) => Ok(vec![String::from_utf8_lossy(&s).into_owned()]),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::Symbol(s) => Ok(String::from_utf8_lossy(s).into_owned()),
                    _ => Err(self.bad(field, "expected symbols")),
                })
                .collect(),
            Some(_) => Err(self.bad(field, "expected symbols")),
        }
    }

    /// A map field (fields, annotations).
    pub fn map(&mut self, field: &'static str) -> Result<Option<Vec<(Value, Value)>>, DecodeError> {
        match self.value() {
            None => Ok(None),
            Some(Value::Map(pairs)) => Ok(Some(pairs)),
            Some(_) => Err(self.bad(field, "expected a map")),
        }
    }
}

/// Builds a described list, leaving out trailing null fields.
pub fn composite(code: u64, mut fields: Vec<Value>) -> Value {
    while fields.last().is_some_and(Value::is_null) {
        fields.pop();
    }
    Value::described(code, Value::List(fields))
}

pub fn opt_uint(v: Option<u32>) -> Value {
    v.map_or(Value::Null, Value::Uint)
}

pub fn opt_string(v: &Option<String>) -> Value {
    v.as_deref().map_or(Value::Null, Value::string)
}

pub fn symbols(values: &[String]) -> Value {
    match values.len() {
        0 => Value::Null,
        _ => Value::Array(values.iter().map(|s| Value::symbol(s)).collect()),
    }
}

pub fn opt_map(v: &Option<Vec<(Value, Value)>>) -> Value {
    v.clone().map_or(Value::Null, Value::Map)
}

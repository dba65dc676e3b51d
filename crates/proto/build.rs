//! Generates the AMQP 0.9.1 method structs, the `Method` enum, the reply-code constants and
//! (for tests) proptest strategies from RabbitMQ's codegen JSON, as `rabbitmq_codegen` does for
//! `rabbit_framing_amqp_0_9_1.erl`. Output goes to `OUT_DIR`:
//!
//! - `amqp091_methods.rs`: included by `src/amqp091/method.rs`
//! - `amqp091_reply_code.rs`: included by `src/amqp091/reply_code.rs`
//! - `amqp091_method_strategies.rs`: included by the method tests

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

const SPEC: &str = "../../spec/amqp-rabbitmq-0.9.1.json";

fn main() {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let spec_path = Path::new(&manifest_dir).join(SPEC);
    println!("cargo:rerun-if-changed={}", spec_path.display());
    println!("cargo:rerun-if-changed=build.rs");

    let text = std::fs::read_to_string(&spec_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", spec_path.display()));
    let json: Value = serde_json::from_str(&text).expect("the spec is valid JSON");
    let spec = Spec::parse(&json);

    write(
        &out_dir.join("amqp091_reply_code.rs"),
        &gen_reply_codes(&spec),
    );
    write(&out_dir.join("amqp091_methods.rs"), &gen_methods(&spec));
    write(
        &out_dir.join("amqp091_method_strategies.rs"),
        &gen_strategies(&spec),
    );
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

/// The wire types of the spec's domains.
#[derive(Clone, Copy, PartialEq)]
enum Ty {
    Bit,
    Octet,
    Short,
    Long,
    LongLong,
    ShortStr,
    LongStr,
    Table,
    Timestamp,
}

impl Ty {
    fn parse(name: &str) -> Ty {
        match name {
            "bit" => Ty::Bit,
            "octet" => Ty::Octet,
            "short" => Ty::Short,
            "long" => Ty::Long,
            "longlong" => Ty::LongLong,
            "shortstr" => Ty::ShortStr,
            "longstr" => Ty::LongStr,
            "table" => Ty::Table,
            "timestamp" => Ty::Timestamp,
            other => panic!("unknown wire type {other:?} in the spec"),
        }
    }

    fn rust(self) -> &'static str {
        match self {
            Ty::Bit => "bool",
            Ty::Octet => "u8",
            Ty::Short => "u16",
            Ty::Long => "u32",
            Ty::LongLong | Ty::Timestamp => "u64",
            Ty::ShortStr => "ShortStr",
            Ty::LongStr => "Bytes",
            Ty::Table => "FieldTable",
        }
    }

    /// The `Decoder` method that reads this type (bits are read as packed octets).
    fn reader(self) -> &'static str {
        match self {
            Ty::Bit | Ty::Octet => "octet",
            Ty::Short => "short",
            Ty::Long => "long",
            Ty::LongLong | Ty::Timestamp => "longlong",
            Ty::ShortStr => "shortstr",
            Ty::LongStr => "longstr",
            Ty::Table => "table",
        }
    }

    /// The `wire` function that writes this type.
    fn writer(self) -> &'static str {
        match self {
            Ty::Bit | Ty::Octet => "put_octet",
            Ty::Short => "put_short",
            Ty::Long => "put_long",
            Ty::LongLong | Ty::Timestamp => "put_longlong",
            Ty::ShortStr => "put_shortstr",
            Ty::LongStr => "put_longstr",
            Ty::Table => "put_table",
        }
    }

    /// A proptest strategy expression for this type (see `method_test.rs` for the helpers).
    fn strategy(self) -> &'static str {
        match self {
            Ty::Bit => "any::<bool>()",
            Ty::Octet => "any::<u8>()",
            Ty::Short => "any::<u16>()",
            Ty::Long => "any::<u32>()",
            Ty::LongLong | Ty::Timestamp => "any::<u64>()",
            Ty::ShortStr => "short_str()",
            Ty::LongStr => "long_str()",
            Ty::Table => "field_table()",
        }
    }
}

struct Arg {
    spec_name: String,
    field: String,
    ty: Ty,
}

struct MethodSpec {
    class_name: String,
    class_id: u16,
    name: String,
    id: u16,
    content: bool,
    args: Vec<Arg>,
}

impl MethodSpec {
    fn rust_name(&self) -> String {
        format!("{}{}", camel(&self.class_name), camel(&self.name))
    }

    fn dotted(&self) -> String {
        format!("{}.{}", self.class_name, self.name)
    }
}

struct ReplyCode {
    name: String,
    value: u16,
    hard: bool,
}

struct Spec {
    methods: Vec<MethodSpec>,
    reply_codes: Vec<ReplyCode>,
}

impl Spec {
    fn parse(json: &Value) -> Spec {
        let domains: Vec<(String, Ty)> = json["domains"]
            .as_array()
            .expect("domains is an array")
            .iter()
            .map(|d| (str_of(&d[0]).to_owned(), Ty::parse(str_of(&d[1]))))
            .collect();
        let domain = |name: &str| -> Ty {
            domains
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, t)| *t)
                .unwrap_or_else(|| panic!("unknown domain {name:?}"))
        };
        let mut methods = Vec::new();
        for class in json["classes"].as_array().expect("classes is an array") {
            let class_name = str_of(&class["name"]);
            let class_id = u16_of(&class["id"]);
            for method in class["methods"].as_array().expect("methods is an array") {
                let args = method["arguments"]
                    .as_array()
                    .expect("arguments is an array")
                    .iter()
                    .map(|a| {
                        let spec_name = str_of(&a["name"]).to_owned();
                        let ty = match a.get("type") {
                            Some(t) => Ty::parse(str_of(t)),
                            None => domain(str_of(&a["domain"])),
                        };
                        Arg {
                            field: field_name(&spec_name),
                            spec_name,
                            ty,
                        }
                    })
                    .collect();
                methods.push(MethodSpec {
                    class_name: class_name.to_owned(),
                    class_id,
                    name: str_of(&method["name"]).to_owned(),
                    id: u16_of(&method["id"]),
                    content: method
                        .get("content")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                    args,
                });
            }
        }
        Spec {
            methods,
            reply_codes: parse_reply_codes(json),
        }
    }
}

fn parse_reply_codes(json: &Value) -> Vec<ReplyCode> {
    let mut codes = Vec::new();
    for c in json["constants"].as_array().expect("constants is an array") {
        let name = str_of(&c["name"]);
        let class = c.get("class").and_then(Value::as_str);
        if class.is_none() && name != "REPLY-SUCCESS" {
            continue;
        }
        codes.push(ReplyCode {
            name: name.replace('-', "_"),
            value: u16_of(&c["value"]),
            hard: class == Some("hard-error"),
        });
    }
    codes
}

fn str_of(v: &Value) -> &str {
    v.as_str()
        .unwrap_or_else(|| panic!("expected a string, got {v}"))
}

fn u16_of(v: &Value) -> u16 {
    let n = v
        .as_u64()
        .unwrap_or_else(|| panic!("expected a number, got {v}"));
    u16::try_from(n).unwrap_or_else(|_| panic!("{n} does not fit a u16"))
}

/// `recover-async` -> `RecoverAsync`.
fn camel(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut chars = part.chars();
            match chars.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

/// `routing-key` -> `routing_key`; `type` -> `kind` (a Rust keyword).
fn field_name(spec_name: &str) -> String {
    match spec_name {
        "type" => "kind".to_owned(),
        other => other.replace('-', "_"),
    }
}

fn gen_reply_codes(spec: &Spec) -> String {
    let mut s = String::from("// Generated by build.rs from amqp-rabbitmq-0.9.1.json.\n\n");
    for c in &spec.reply_codes {
        let kind = if c.name == "REPLY_SUCCESS" {
            "success"
        } else if c.hard {
            "hard error (closes the connection)"
        } else {
            "soft error (closes the channel)"
        };
        writeln!(
            s,
            "/// {} ({kind}).\npub const {}: u16 = {};",
            c.value, c.name, c.value
        )
        .ok();
    }
    s.push_str("\n/// Whether `code` is a hard error: one that closes the whole connection.\n");
    s.push_str("pub fn is_hard_error(code: u16) -> bool {\n    matches!(code, ");
    let hard: Vec<String> = spec
        .reply_codes
        .iter()
        .filter(|c| c.hard)
        .map(|c| c.name.clone())
        .collect();
    s.push_str(&hard.join(" | "));
    s.push_str(")\n}\n\n");
    s.push_str("/// The spec's name for `code` (`\"NOT_FOUND\"`), or `\"UNKNOWN\"`.\n");
    s.push_str("pub fn name(code: u16) -> &'static str {\n    match code {\n");
    for c in &spec.reply_codes {
        writeln!(s, "        {} => \"{}\",", c.name, c.name).ok();
    }
    s.push_str("        _ => \"UNKNOWN\",\n    }\n}\n");
    s
}

fn gen_methods(spec: &Spec) -> String {
    let mut s = String::from("// Generated by build.rs from amqp-rabbitmq-0.9.1.json.\n\n");
    for m in &spec.methods {
        gen_struct(&mut s, m);
        gen_struct_impl(&mut s, m);
    }
    gen_enum(&mut s, spec);
    gen_enum_impl(&mut s, spec);
    gen_decode_dispatch(&mut s, spec);
    gen_method_name(&mut s, spec);
    s
}

fn gen_struct(s: &mut String, m: &MethodSpec) {
    let name = m.rust_name();
    writeln!(
        s,
        "/// `{}` (class {}, method {}).",
        m.dotted(),
        m.class_id,
        m.id
    )
    .ok();
    s.push_str("#[derive(Clone, Debug, PartialEq, Default)]\n");
    if m.args.is_empty() {
        writeln!(s, "pub struct {name};\n").ok();
        return;
    }
    writeln!(s, "pub struct {name} {{").ok();
    for a in &m.args {
        writeln!(
            s,
            "    /// `{}`\n    pub {}: {},",
            a.spec_name,
            a.field,
            a.ty.rust()
        )
        .ok();
    }
    s.push_str("}\n\n");
}

/// Groups the arguments as they sit on the wire: runs of consecutive bits share octets, at most
/// eight to an octet, lowest bit first.
fn wire_groups(args: &[Arg]) -> Vec<Vec<&Arg>> {
    let mut groups: Vec<Vec<&Arg>> = Vec::new();
    for a in args {
        let joins = match groups.last() {
            Some(last) => a.ty == Ty::Bit && last.len() < 8 && last.iter().all(|b| b.ty == Ty::Bit),
            None => false,
        };
        match groups.last_mut() {
            Some(last) if joins => last.push(a),
            _ => groups.push(vec![a]),
        }
    }
    groups
}

fn gen_struct_impl(s: &mut String, m: &MethodSpec) {
    let name = m.rust_name();
    writeln!(s, "impl {name} {{").ok();
    writeln!(
        s,
        "    /// The class id, {}.\n    pub const CLASS_ID: u16 = {};",
        m.class_id, m.class_id
    )
    .ok();
    writeln!(
        s,
        "    /// The method id, {}.\n    pub const METHOD_ID: u16 = {};",
        m.id, m.id
    )
    .ok();
    writeln!(
        s,
        "    /// `\"{}\"`.\n    pub const NAME: &'static str = \"{}\";",
        m.dotted(),
        m.dotted()
    )
    .ok();
    gen_decode_args(s, m);
    gen_encode_args(s, m);
    gen_args_len(s, m);
    s.push_str("}\n\n");
    writeln!(
        s,
        "impl From<{name}> for Method {{\n    fn from(m: {name}) -> Method {{\n        \
         Method::{name}(m)\n    }}\n}}\n"
    )
    .ok();
}

fn gen_decode_args(s: &mut String, m: &MethodSpec) {
    let var = if m.args.is_empty() { "_d" } else { "d" };
    writeln!(
        s,
        "    fn decode_args({var}: &mut Decoder<'_>) -> Result<{}, DecodeError> {{",
        m.rust_name()
    )
    .ok();
    for (i, group) in wire_groups(&m.args).iter().enumerate() {
        match group.as_slice() {
            [a] if a.ty != Ty::Bit => {
                writeln!(
                    s,
                    "        let {} = d.{}(\"{}\")?;",
                    a.field,
                    a.ty.reader(),
                    a.spec_name
                )
                .ok();
            }
            bits => {
                let first = bits
                    .first()
                    .map(|a| a.spec_name.as_str())
                    .unwrap_or_default();
                writeln!(s, "        let bits{i} = d.octet(\"{first}\")?;").ok();
                for (bit, a) in bits.iter().enumerate() {
                    let mask = 1u8 << bit;
                    writeln!(s, "        let {} = bits{i} & 0x{mask:02X} != 0;", a.field).ok();
                }
            }
        }
    }
    if m.args.is_empty() {
        writeln!(s, "        Ok({})\n    }}", m.rust_name()).ok();
        return;
    }
    let fields: Vec<&str> = m.args.iter().map(|a| a.field.as_str()).collect();
    writeln!(
        s,
        "        Ok({} {{ {} }})\n    }}",
        m.rust_name(),
        fields.join(", ")
    )
    .ok();
}

fn gen_encode_args(s: &mut String, m: &MethodSpec) {
    let var = if m.args.is_empty() { "_out" } else { "out" };
    writeln!(s, "    fn encode_args(&self, {var}: &mut BytesMut) {{").ok();
    for group in wire_groups(&m.args) {
        match group.as_slice() {
            [a] if a.ty != Ty::Bit => {
                let by_ref = matches!(a.ty, Ty::ShortStr | Ty::LongStr | Ty::Table);
                let amp = if by_ref { "&" } else { "" };
                writeln!(
                    s,
                    "        wire::{}(out, {amp}self.{});",
                    a.ty.writer(),
                    a.field
                )
                .ok();
            }
            bits => {
                let parts: Vec<String> = bits
                    .iter()
                    .enumerate()
                    .map(|(bit, a)| match bit {
                        0 => format!("u8::from(self.{})", a.field),
                        _ => format!("(u8::from(self.{}) << {bit})", a.field),
                    })
                    .collect();
                writeln!(s, "        wire::put_octet(out, {});", parts.join(" | ")).ok();
            }
        }
    }
    s.push_str("    }\n");
}

/// `args_len`: the exact encoded size of the arguments, so that frames reserve once.
fn gen_args_len(s: &mut String, m: &MethodSpec) {
    let mut terms = Vec::new();
    let mut fixed = 0usize;
    for group in wire_groups(&m.args) {
        match group.as_slice() {
            [a] if a.ty != Ty::Bit => match a.ty {
                Ty::Octet => fixed += 1,
                Ty::Short => fixed += 2,
                Ty::Long => fixed += 4,
                Ty::LongLong | Ty::Timestamp => fixed += 8,
                Ty::ShortStr => terms.push(format!("1 + self.{}.len()", a.field)),
                Ty::LongStr => terms.push(format!("4 + self.{}.len()", a.field)),
                Ty::Table => terms.push(format!("self.{}.encoded_len()", a.field)),
                Ty::Bit => {}
            },
            _ => fixed += 1,
        }
    }
    if fixed > 0 || terms.is_empty() {
        terms.insert(0, fixed.to_string());
    }
    s.push_str("    fn args_len(&self) -> usize {\n");
    writeln!(s, "        {}\n    }}", terms.join(" + ")).ok();
}

fn gen_enum(s: &mut String, spec: &Spec) {
    s.push_str(
        "/// Every AMQP 0.9.1 method (RabbitMQ's dialect), one variant per method struct.\n",
    );
    s.push_str("#[derive(Clone, Debug, PartialEq)]\npub enum Method {\n");
    for m in &spec.methods {
        writeln!(
            s,
            "    /// `{}`\n    {}({}),",
            m.dotted(),
            m.rust_name(),
            m.rust_name()
        )
        .ok();
    }
    s.push_str("}\n\n");
}

/// Writes `fn $name(&self) -> $ty` as a match over every variant.
fn gen_enum_getter(
    s: &mut String,
    spec: &Spec,
    doc: &str,
    sig: &str,
    value: &dyn Fn(&MethodSpec) -> String,
) {
    writeln!(
        s,
        "    /// {doc}\n    #[allow(clippy::too_many_lines)]\n    {sig} {{\n        match self {{"
    )
    .ok();
    for m in &spec.methods {
        let value = value(m);
        let binding = if value.contains("m.args_len") {
            "m"
        } else {
            "_"
        };
        writeln!(
            s,
            "            Method::{}({binding}) => {value},",
            m.rust_name()
        )
        .ok();
    }
    s.push_str("        }\n    }\n\n");
}

fn gen_enum_impl(s: &mut String, spec: &Spec) {
    s.push_str("impl Method {\n");
    gen_enum_getter(
        s,
        spec,
        "The class id.",
        "pub fn class_id(&self) -> u16",
        &|m| m.class_id.to_string(),
    );
    gen_enum_getter(
        s,
        spec,
        "The method id within the class.",
        "pub fn method_id(&self) -> u16",
        &|m| m.id.to_string(),
    );
    gen_enum_getter(
        s,
        spec,
        "The spec's dotted name, e.g. `\"basic.publish\"`.",
        "pub fn name(&self) -> &'static str",
        &|m| format!("\"{}\"", m.dotted()),
    );
    gen_enum_getter(
        s,
        spec,
        "Whether a content header (and body frames) follow this method.",
        "pub fn has_content(&self) -> bool",
        &|m| m.content.to_string(),
    );
    s.push_str(
        "    /// Writes the method payload: class-id, method-id, then the arguments \
         (no frame envelope).\n",
    );
    s.push_str("    #[allow(clippy::too_many_lines)]\n");
    s.push_str("    pub fn encode(&self, out: &mut BytesMut) {\n        match self {\n");
    for m in &spec.methods {
        let (name, class_id, method_id) = (m.rust_name(), m.class_id, m.id);
        writeln!(s, "            Method::{name}(m) => {{").ok();
        writeln!(s, "                wire::put_short(out, {class_id});").ok();
        writeln!(s, "                wire::put_short(out, {method_id});").ok();
        writeln!(s, "                m.encode_args(out);\n            }}").ok();
    }
    s.push_str("        }\n    }\n\n");
    gen_enum_getter(
        s,
        spec,
        "The exact size `encode` writes: 4 bytes of ids plus the arguments.",
        "pub fn encoded_len(&self) -> usize",
        &|_| "4 + m.args_len()".to_owned(),
    );
    s.push_str("}\n\n");
}

/// `decode_args_of(class_id, method_id, d)`: `None` for an unknown method.
fn gen_decode_dispatch(s: &mut String, spec: &Spec) {
    s.push_str("#[allow(clippy::too_many_lines)]\n");
    s.push_str(
        "fn decode_args_of(class_id: u16, method_id: u16, d: &mut Decoder<'_>) \
         -> Option<Result<Method, DecodeError>> {\n",
    );
    s.push_str("    let result = match (class_id, method_id) {\n");
    for m in &spec.methods {
        writeln!(
            s,
            "        ({}, {}) => {}::decode_args(d).map(Method::{}),",
            m.class_id,
            m.id,
            m.rust_name(),
            m.rust_name()
        )
        .ok();
    }
    s.push_str("        _ => return None,\n    };\n    Some(result)\n}\n\n");
}

fn gen_method_name(s: &mut String, spec: &Spec) {
    s.push_str(
        "/// The dotted name of a method (`\"basic.publish\"`), for error texts; \
         `None` if unknown.\n",
    );
    s.push_str("#[allow(clippy::too_many_lines)]\n");
    s.push_str("pub fn method_name(class_id: u16, method_id: u16) -> Option<&'static str> {\n");
    s.push_str("    let name = match (class_id, method_id) {\n");
    for m in &spec.methods {
        writeln!(
            s,
            "        ({}, {}) => \"{}\",",
            m.class_id,
            m.id,
            m.dotted()
        )
        .ok();
    }
    s.push_str("        _ => return None,\n    };\n    Some(name)\n}\n");
}

fn gen_strategies(spec: &Spec) -> String {
    let mut s = String::from("// Generated by build.rs from amqp-rabbitmq-0.9.1.json.\n\n");
    s.push_str("/// Every method, with arbitrary arguments.\n");
    s.push_str("#[allow(clippy::too_many_lines)]\n");
    s.push_str("pub(crate) fn any_method() -> BoxedStrategy<Method> {\n");
    s.push_str("    proptest::strategy::Union::new(vec![\n");
    for m in &spec.methods {
        let name = m.rust_name();
        if m.args.is_empty() {
            writeln!(s, "        Just(Method::{name}({name})).boxed(),").ok();
            continue;
        }
        let strategies: Vec<&str> = m.args.iter().map(|a| a.ty.strategy()).collect();
        let fields: Vec<&str> = m.args.iter().map(|a| a.field.as_str()).collect();
        writeln!(
            s,
            "        ({},).prop_map(|({},)| Method::{name}({name} {{ {} }})).boxed(),",
            strategies.join(", "),
            fields.join(", "),
            fields.join(", ")
        )
        .ok();
    }
    s.push_str("    ])\n    .boxed()\n}\n\n");
    s.push_str("/// Every method once, with default arguments.\n");
    s.push_str("pub(crate) fn every_method() -> Vec<Method> {\n    vec![\n");
    for m in &spec.methods {
        writeln!(s, "        Method::{}(Default::default()),", m.rust_name()).ok();
    }
    s.push_str("    ]\n}\n");
    s
}

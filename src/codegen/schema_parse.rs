//! A small parser for our own .proto files: the proto2 subset we use
//! (message, enum, oneof, fields with `[packed = true]`; reserved,
//! extensions, options and services are skipped). Type names are resolved
//! with protobuf scoping rules. Schema errors panic, failing the build.

/// Field types, numbered like `google.protobuf.FieldDescriptorProto.Type`.
const SCALAR_TYPES: &[(&str, u8)] = &[
    ("double", 1),
    ("float", 2),
    ("int64", 3),
    ("uint64", 4),
    ("int32", 5),
    ("fixed64", 6),
    ("fixed32", 7),
    ("bool", 8),
    ("string", 9),
    ("bytes", 12),
    ("uint32", 13),
    ("sfixed32", 15),
    ("sfixed64", 16),
    ("sint32", 17),
    ("sint64", 18),
];
pub const TYPE_MESSAGE: u8 = 11;
pub const TYPE_ENUM: u8 = 14;

#[derive(Debug)]
pub struct Field {
    pub name: String,
    pub number: u32,
    /// 1 optional, 2 required, 3 repeated (descriptor.proto numbering).
    pub label: u8,
    pub type_name: String,
    pub packed: bool,
    /// 1-based oneof group inside its message, 0 if none.
    pub oneof: u8,
    /// Filled by `resolve`: descriptor type and full name of message/enum.
    pub ty: u8,
    pub resolved: String,
}

#[derive(Debug)]
pub struct Message {
    pub full_name: String,
    pub fields: Vec<Field>,
    pub oneofs: Vec<String>,
}

#[derive(Debug)]
pub struct Enum {
    pub full_name: String,
    pub values: Vec<(String, i32)>,
}

#[derive(Debug, Default)]
pub struct Schema {
    pub messages: Vec<Message>,
    pub enums: Vec<Enum>,
}

fn tokenize(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let end = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
            i = end;
        } else if c == b'"' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            toks.push(text[start..i.min(b.len())].to_string());
        } else if c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'-' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b"_.-".contains(&b[i])) {
                i += 1;
            }
            toks.push(text[start..i].to_string());
        } else {
            toks.push((c as char).to_string());
            i += 1;
        }
    }
    toks
}

struct Parser {
    toks: Vec<String>,
    pos: usize,
    schema: Schema,
}

impl Parser {
    fn peek(&self) -> &str {
        self.toks.get(self.pos).map_or("", |s| s.as_str())
    }
    fn next(&mut self) -> String {
        let t = self.peek().to_string();
        assert!(
            self.pos < self.toks.len(),
            "schema: unexpected end of input"
        );
        self.pos += 1;
        t
    }
    fn expect(&mut self, want: &str) {
        let got = self.next();
        assert_eq!(
            got, want,
            "schema: expected `{want}` near token {}",
            self.pos
        );
    }
    /// Skips a statement up to `;`, or a `{...}` block.
    fn skip_statement(&mut self) {
        let mut depth = 0;
        loop {
            match self.next().as_str() {
                "{" => depth += 1,
                "}" => {
                    depth -= 1;
                    if depth == 0 {
                        return;
                    }
                }
                ";" if depth == 0 => return,
                _ => {}
            }
        }
    }

    fn parse_file(&mut self) {
        while self.pos < self.toks.len() {
            match self.peek() {
                "message" => {
                    self.next();
                    self.parse_message("");
                }
                "enum" => {
                    self.next();
                    self.parse_enum("");
                }
                _ => self.skip_statement(),
            }
        }
    }

    fn parse_enum(&mut self, scope: &str) {
        let full_name = format!("{scope}{}", self.next());
        self.expect("{");
        let mut values = Vec::new();
        while self.peek() != "}" {
            if matches!(self.peek(), "option" | "reserved" | ";") {
                self.skip_statement();
                continue;
            }
            let name = self.next();
            self.expect("=");
            let v = self.next();
            let v: i32 = v
                .parse()
                .unwrap_or_else(|_| panic!("schema: bad enum value {v}"));
            self.skip_options();
            self.expect(";");
            values.push((name, v));
        }
        self.expect("}");
        self.schema.enums.push(Enum { full_name, values });
    }

    /// Returns true if the option list contained `packed = true`.
    fn skip_options(&mut self) -> bool {
        let mut packed = false;
        if self.peek() == "[" {
            while self.peek() != "]" {
                if self.next() == "packed" {
                    self.expect("=");
                    packed = self.next() == "true";
                }
            }
            self.next();
        }
        packed
    }

    fn parse_field(&mut self, label: u8, oneof: u8) -> Field {
        let type_name = self.next();
        let name = self.next();
        self.expect("=");
        let n = self.next();
        let number: u32 = n
            .parse()
            .unwrap_or_else(|_| panic!("schema: bad field number {n}"));
        let packed = self.skip_options();
        self.expect(";");
        Field {
            name,
            number,
            label,
            type_name,
            packed,
            oneof,
            ty: 0,
            resolved: String::new(),
        }
    }

    fn parse_message(&mut self, scope: &str) {
        let full_name = format!("{scope}{}", self.next());
        let inner = format!("{full_name}.");
        self.expect("{");
        let mut msg = Message {
            full_name,
            fields: Vec::new(),
            oneofs: Vec::new(),
        };
        while self.peek() != "}" {
            match self.peek() {
                "message" => {
                    self.next();
                    self.parse_message(&inner);
                }
                "enum" => {
                    self.next();
                    self.parse_enum(&inner);
                }
                "oneof" => {
                    self.next();
                    msg.oneofs.push(self.next());
                    let idx = msg.oneofs.len() as u8;
                    self.expect("{");
                    while self.peek() != "}" {
                        let f = self.parse_field(1, idx);
                        msg.fields.push(f);
                    }
                    self.expect("}");
                }
                "option" | "reserved" | "extensions" | "extend" | ";" => self.skip_statement(),
                "optional" | "required" | "repeated" => {
                    let label = match self.next().as_str() {
                        "optional" => 1,
                        "required" => 2,
                        _ => 3,
                    };
                    let f = self.parse_field(label, 0);
                    msg.fields.push(f);
                }
                _ => {
                    let f = self.parse_field(1, 0);
                    msg.fields.push(f);
                }
            }
        }
        self.expect("}");
        self.schema.messages.push(msg);
    }
}

/// Parses merged schema text (single package) into a resolved [`Schema`]
/// with full names `package.Outer.Inner`. Panics on schema errors, which
/// turns them into build failures.
pub fn parse_schema(text: &str, package: &str) -> Schema {
    let mut p = Parser {
        toks: tokenize(text),
        pos: 0,
        schema: Schema::default(),
    };
    p.parse_file();
    let mut schema = p.schema;
    let prefix = format!("{package}.");
    for m in &mut schema.messages {
        m.full_name.insert_str(0, &prefix);
    }
    for e in &mut schema.enums {
        e.full_name.insert_str(0, &prefix);
    }
    resolve(&mut schema, package);
    schema
        .messages
        .sort_by(|a, b| a.full_name.cmp(&b.full_name));
    schema.enums.sort_by(|a, b| a.full_name.cmp(&b.full_name));
    schema
}

fn resolve(schema: &mut Schema, package: &str) {
    use std::collections::{HashMap, HashSet};
    let messages: HashSet<String> = schema
        .messages
        .iter()
        .map(|m| m.full_name.clone())
        .collect();
    let enums: HashSet<String> = schema.enums.iter().map(|e| e.full_name.clone()).collect();
    for m in &mut schema.messages {
        let mut numbers = HashMap::new();
        let mut names = HashSet::new();
        for f in &mut m.fields {
            assert!(
                numbers.insert(f.number, ()).is_none(),
                "{}: duplicate number {}",
                m.full_name,
                f.number
            );
            assert!(
                names.insert(f.name.clone()),
                "{}: duplicate field {}",
                m.full_name,
                f.name
            );
            if let Some(&(_, t)) = SCALAR_TYPES.iter().find(|(n, _)| *n == f.type_name) {
                f.ty = t;
                continue;
            }
            // `.a.b.C` is absolute; otherwise protobuf scoping applies:
            // innermost enclosing scope first.
            let absolute = f.type_name.starts_with('.');
            let wanted = f.type_name.trim_start_matches('.');
            let wanted = wanted
                .strip_prefix(&format!("{package}."))
                .unwrap_or(wanted);
            let mut scope: Vec<&str> = m.full_name.split('.').collect();
            if absolute {
                scope = package.split('.').collect();
            }
            loop {
                let cand = format!("{}.{wanted}", scope.join("."));
                if messages.contains(&cand) {
                    f.ty = TYPE_MESSAGE;
                    f.resolved = cand;
                    break;
                }
                if enums.contains(&cand) {
                    f.ty = TYPE_ENUM;
                    f.resolved = cand;
                    break;
                }
                assert!(
                    !scope.is_empty() && !absolute,
                    "{}.{}: unknown type {}",
                    m.full_name,
                    f.name,
                    f.type_name
                );
                scope.pop();
            }
        }
        m.fields.sort_by_key(|f| f.number);
    }
}

/// Keeps only the messages and enums reachable from `roots` (names relative
/// to `package`). Panics on an unknown root.
pub fn retain_reachable(schema: &mut Schema, roots: &[String], package: &str) {
    use std::collections::HashSet;
    let mut keep: HashSet<String> = HashSet::new();
    let mut todo: Vec<String> = roots.iter().map(|r| format!("{package}.{r}")).collect();
    while let Some(name) = todo.pop() {
        if !keep.insert(name.clone()) {
            continue;
        }
        if let Some(m) = schema.messages.iter().find(|m| m.full_name == name) {
            todo.extend(
                m.fields
                    .iter()
                    .filter(|f| !f.resolved.is_empty())
                    .map(|f| f.resolved.clone()),
            );
        } else {
            assert!(
                schema.enums.iter().any(|e| e.full_name == name),
                "schema: unknown root {name}"
            );
        }
    }
    schema.messages.retain(|m| keep.contains(&m.full_name));
    schema.enums.retain(|e| keep.contains(&e.full_name));
}

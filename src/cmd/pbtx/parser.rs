//! Schema-driven text-format parser: walks the token stream with the
//! message descriptors from `crate::schema` and encodes fields as it goes.
//! There is no per-field code; every message type is handled alike.

use super::error::{did_you_mean, PbtxError};
use super::lexer::{Lexer, TokKind, Token};
use super::scalar::{int_in_range, parse_bool, parse_float, parse_int};
use super::ParseOptions;
use crate::protozero::{self as pz, VecStream};
use crate::schema::{FieldDesc, FieldType, MessageDesc};

/// Deepest message nesting accepted (the config tree is ~5 deep).
const MAX_DEPTH: usize = 64;

type Result<T> = std::result::Result<T, PbtxError>;

fn err(tok: &Token, msg: String) -> PbtxError {
    PbtxError::new(tok.line, tok.col, tok.text.clone(), msg)
}

/// Short name used in messages: `BufferConfig` for `TraceConfig.BufferConfig`.
fn short_name(desc: &MessageDesc) -> &'static str {
    let n = desc.name();
    n.rsplit('.').next().unwrap_or(n)
}

/// Per-message bookkeeping while its body is parsed.
#[derive(Default)]
struct MsgState {
    /// Numbers of non-repeated fields already set.
    seen: Vec<u32>,
    /// (oneof group, field name) already set.
    oneofs: Vec<(u8, &'static str)>,
    /// Packed repeated fields: (field number, encoded elements), written
    /// when the message ends.
    packed: Vec<(u32, Vec<u8>)>,
}

/// A scalar ready to be written.
enum Scalar {
    Varint(u64),
    Zigzag(i64),
    Fixed32(u32),
    Fixed64(u64),
    Bytes(Vec<u8>),
}

pub(super) struct Parser<'a> {
    lex: Lexer<'a>,
    peeked: Option<Token>,
    opts: ParseOptions,
    pub(super) out: VecStream,
    depth: usize,
}

impl<'a> Parser<'a> {
    pub(super) fn new(text: &'a str, opts: ParseOptions) -> Self {
        Parser {
            lex: Lexer::new(text),
            peeked: None,
            opts,
            out: VecStream::new(),
            depth: 0,
        }
    }

    fn peek(&mut self) -> Result<&Token> {
        if self.peeked.is_none() {
            self.peeked = Some(self.lex.next_token()?);
        }
        Ok(self.peeked.as_ref().unwrap())
    }

    fn next(&mut self) -> Result<Token> {
        match self.peeked.take() {
            Some(t) => Ok(t),
            None => self.lex.next_token(),
        }
    }

    fn peek_is(&mut self, p: u8) -> Result<bool> {
        Ok(self.peek()?.kind == TokKind::Punct(p))
    }

    /// Parses fields until `close` (or end of input for the root message).
    pub(super) fn parse_body(
        &mut self,
        desc: &'static MessageDesc,
        open: Option<&Token>,
    ) -> Result<()> {
        let close = open.map(|t| if t.text == "<" { b'>' } else { b'}' });
        let mut st = MsgState::default();
        loop {
            let tok = self.next()?;
            match tok.kind {
                TokKind::Eof => {
                    if let Some(open) = open {
                        return Err(err(open, "Nested message not closed".into()));
                    }
                    break;
                }
                TokKind::Punct(p) if Some(p) == close => break,
                TokKind::Punct(b'}') | TokKind::Punct(b'>') => {
                    return Err(err(&tok, "Unmatched closing brace".into()));
                }
                TokKind::Punct(b';') | TokKind::Punct(b',') => continue,
                TokKind::Punct(b'[') => self.extension(&tok)?,
                TokKind::Ident => self.field(desc, &mut st, &tok)?,
                _ => {
                    return Err(err(
                        &tok,
                        format!("Expected a field name, saw '{}'", tok.text),
                    ))
                }
            }
        }
        for (number, payload) in st.packed {
            pz::put_bytes(&mut self.out, number, &payload);
        }
        Ok(())
    }

    /// `[ext.name]: value` — our schemas declare no extensions.
    fn extension(&mut self, open: &Token) -> Result<()> {
        let mut name = String::new();
        loop {
            let t = self.next()?;
            match t.kind {
                TokKind::Punct(b']') => break,
                TokKind::Ident | TokKind::Number => name.push_str(&t.text),
                _ => return Err(err(&t, "Malformed extension name".into())),
            }
        }
        if !self.opts.allow_unknown {
            return Err(err(
                open,
                format!("No extension named \"{name}\" registered"),
            ));
        }
        self.skip_value()
    }

    fn field(&mut self, desc: &'static MessageDesc, st: &mut MsgState, key: &Token) -> Result<()> {
        let Some(field) = desc.field_by_name(&key.text) else {
            if self.opts.allow_unknown {
                return self.skip_value();
            }
            let hint = did_you_mean(&key.text, desc.fields().iter().map(|f| f.name()));
            return Err(err(
                key,
                format!(
                    "No field named \"{}\" in proto {}{hint}",
                    key.text,
                    short_name(desc)
                ),
            ));
        };
        if !field.is_repeated() {
            if st.seen.contains(&field.number()) {
                return Err(err(
                    key,
                    format!("Saw non-repeating field '{}' more than once", key.text),
                ));
            }
            st.seen.push(field.number());
        }
        if let Some(group) = field.oneof_index() {
            if let Some(&(_, other)) = st
                .oneofs
                .iter()
                .find(|(g, n)| *g == group && *n != field.name())
            {
                return Err(err(
                    key,
                    format!(
                        "Field '{}' and field '{other}' are members of the same oneof",
                        key.text
                    ),
                ));
            }
            st.oneofs.push((group, field.name()));
        }
        if self.peek_is(b':')? {
            self.next()?;
        }
        if field.is_repeated() && self.peek_is(b'[')? {
            // List form: `field: [v1, v2]`.
            self.next()?;
            if self.peek_is(b']')? {
                self.next()?;
                return Ok(());
            }
            loop {
                self.value(desc, field, st, key)?;
                let t = self.next()?;
                match t.kind {
                    TokKind::Punct(b',') => continue,
                    TokKind::Punct(b']') => return Ok(()),
                    _ => return Err(err(&t, format!("Expected ',' or ']', saw '{}'", t.text))),
                }
            }
        }
        self.value(desc, field, st, key)
    }

    fn value(
        &mut self,
        desc: &'static MessageDesc,
        field: &'static FieldDesc,
        st: &mut MsgState,
        key: &Token,
    ) -> Result<()> {
        let tok = self.next()?;
        if tok.kind == TokKind::Eof {
            return Err(err(
                &tok,
                format!("Unexpected end of input, expected a value for {}", key.text),
            ));
        }
        let ty = field.field_type();
        let type_error = |tok: &Token| {
            err(
                tok,
                format!(
                    "Expected value of type {} for field {} in proto {} instead saw '{}'",
                    ty.proto_name(),
                    key.text,
                    short_name(desc),
                    tok.text
                ),
            )
        };
        if ty == FieldType::Message {
            if tok.kind != TokKind::Punct(b'{') && tok.kind != TokKind::Punct(b'<') {
                return Err(type_error(&tok));
            }
            if self.depth >= MAX_DEPTH {
                return Err(err(&tok, "Messages nested too deeply".into()));
            }
            self.depth += 1;
            let nested = pz::begin_nested(&mut self.out, field.number());
            self.parse_body(field.message_type().unwrap(), Some(&tok))?;
            pz::end_nested(&mut self.out, nested);
            self.depth -= 1;
            return Ok(());
        }
        let range_error = |tok: &Token| {
            err(
                tok,
                format!(
                    "Value '{}' out of range for {} field {}",
                    tok.text,
                    ty.proto_name(),
                    key.text
                ),
            )
        };
        let int = |min: i128, max: i128| -> Result<i128> {
            if tok.kind != TokKind::Number {
                return Err(type_error(&tok));
            }
            let (neg, mag) = match parse_int(&tok.text) {
                Some(v) => v,
                None if parse_float(&tok.text).is_some() && !tok.text.contains("0x") => {
                    // An integer field given a fraction/exponent, or too many digits.
                    let all_digits = tok
                        .text
                        .trim_start_matches('-')
                        .bytes()
                        .all(|b| b.is_ascii_digit());
                    return Err(if all_digits {
                        range_error(&tok)
                    } else {
                        type_error(&tok)
                    });
                }
                None => return Err(type_error(&tok)),
            };
            int_in_range(neg, mag, min, max).ok_or_else(|| range_error(&tok))
        };
        let scalar = match ty {
            FieldType::Int32 => {
                Scalar::Varint(int(i32::MIN as i128, i32::MAX as i128)? as i64 as u64)
            }
            FieldType::Int64 => {
                Scalar::Varint(int(i64::MIN as i128, i64::MAX as i128)? as i64 as u64)
            }
            FieldType::Uint32 => Scalar::Varint(int(0, u32::MAX as i128)? as u64),
            FieldType::Uint64 => Scalar::Varint(int(0, u64::MAX as i128)? as u64),
            FieldType::Sint32 => Scalar::Zigzag(int(i32::MIN as i128, i32::MAX as i128)? as i64),
            FieldType::Sint64 => Scalar::Zigzag(int(i64::MIN as i128, i64::MAX as i128)? as i64),
            FieldType::Fixed32 => Scalar::Fixed32(int(0, u32::MAX as i128)? as u32),
            FieldType::Sfixed32 => {
                Scalar::Fixed32(int(i32::MIN as i128, i32::MAX as i128)? as i32 as u32)
            }
            FieldType::Fixed64 => Scalar::Fixed64(int(0, u64::MAX as i128)? as u64),
            FieldType::Sfixed64 => {
                Scalar::Fixed64(int(i64::MIN as i128, i64::MAX as i128)? as i64 as u64)
            }
            FieldType::Double | FieldType::Float => {
                if !matches!(tok.kind, TokKind::Number | TokKind::Ident) {
                    return Err(type_error(&tok));
                }
                let v = parse_float(&tok.text).ok_or_else(|| type_error(&tok))?;
                if ty == FieldType::Double {
                    Scalar::Fixed64(v.to_bits())
                } else {
                    Scalar::Fixed32((v as f32).to_bits())
                }
            }
            FieldType::Bool => {
                if !matches!(tok.kind, TokKind::Number | TokKind::Ident) {
                    return Err(type_error(&tok));
                }
                match parse_bool(&tok.text) {
                    Some(b) => Scalar::Varint(b as u64),
                    None => {
                        return Err(err(
                            &tok,
                            format!(
                                "Expected 'true' or 'false' for boolean field {} in proto {} instead saw '{}'",
                                key.text,
                                short_name(desc),
                                tok.text
                            ),
                        ))
                    }
                }
            }
            FieldType::Enum => {
                let en = field.enum_type().unwrap();
                let number = match tok.kind {
                    TokKind::Ident => en.value_by_name(&tok.text),
                    TokKind::Number => parse_int(&tok.text)
                        .and_then(|(neg, mag)| {
                            int_in_range(neg, mag, i32::MIN as i128, i32::MAX as i128)
                        })
                        .and_then(|v| en.value_by_number(v as i32))
                        .map(|v| v.number()),
                    _ => return Err(type_error(&tok)),
                };
                match number {
                    Some(n) => Scalar::Varint(n as i64 as u64),
                    None if self.opts.allow_unknown => return Ok(()),
                    None => {
                        let hint = did_you_mean(&tok.text, en.values().iter().map(|v| v.name()));
                        return Err(err(
                            &tok,
                            format!(
                                "Unexpected value '{}' for enum field {} in proto {}{hint}",
                                tok.text,
                                key.text,
                                short_name(desc)
                            ),
                        ));
                    }
                }
            }
            FieldType::String | FieldType::Bytes => {
                if tok.kind != TokKind::Str {
                    return Err(type_error(&tok));
                }
                let mut bytes = tok.bytes.clone();
                // Adjacent literals concatenate: "abc" 'def'.
                while self.peek()?.kind == TokKind::Str {
                    bytes.extend_from_slice(&self.next()?.bytes);
                }
                if ty == FieldType::String && std::str::from_utf8(&bytes).is_err() {
                    return Err(err(
                        &tok,
                        format!("String field {} is not valid UTF-8", key.text),
                    ));
                }
                Scalar::Bytes(bytes)
            }
            FieldType::Message => unreachable!(),
        };
        self.emit(field, st, scalar);
        Ok(())
    }

    fn emit(&mut self, field: &FieldDesc, st: &mut MsgState, v: Scalar) {
        let n = field.number();
        if field.is_packed() {
            let buf = match st.packed.iter_mut().find(|(num, _)| *num == n) {
                Some((_, b)) => b,
                None => {
                    st.packed.push((n, Vec::new()));
                    &mut st.packed.last_mut().unwrap().1
                }
            };
            let mut tmp = [0u8; 10];
            let mut varint = |x: u64| {
                let len = pz::encode_varint(x, &mut tmp);
                buf.extend_from_slice(&tmp[..len]);
            };
            match v {
                Scalar::Varint(x) => varint(x),
                Scalar::Zigzag(x) => varint(((x << 1) ^ (x >> 63)) as u64),
                Scalar::Fixed32(x) => buf.extend_from_slice(&x.to_le_bytes()),
                Scalar::Fixed64(x) => buf.extend_from_slice(&x.to_le_bytes()),
                Scalar::Bytes(_) => unreachable!("strings cannot be packed"),
            }
            return;
        }
        match v {
            Scalar::Varint(x) => pz::put_varint(&mut self.out, n, x),
            Scalar::Zigzag(x) => pz::put_sint(&mut self.out, n, x),
            Scalar::Fixed32(x) => pz::put_fixed32(&mut self.out, n, x),
            Scalar::Fixed64(x) => pz::put_fixed64(&mut self.out, n, x),
            Scalar::Bytes(b) => pz::put_bytes(&mut self.out, n, &b),
        }
    }

    /// Skips the value of an unknown field (lossy mode), iteratively so
    /// that deep nesting cannot overflow the stack.
    fn skip_value(&mut self) -> Result<()> {
        if self.peek_is(b':')? {
            self.next()?;
        }
        let first = self.next()?;
        match first.kind {
            TokKind::Punct(b'{') | TokKind::Punct(b'<') | TokKind::Punct(b'[') => {
                let mut depth = 1usize;
                while depth > 0 {
                    let t = self.next()?;
                    match t.kind {
                        TokKind::Punct(b'{') | TokKind::Punct(b'<') | TokKind::Punct(b'[') => {
                            depth += 1
                        }
                        TokKind::Punct(b'}') | TokKind::Punct(b'>') | TokKind::Punct(b']') => {
                            depth -= 1
                        }
                        TokKind::Eof => {
                            return Err(err(&first, "Nested message not closed".into()))
                        }
                        _ => {}
                    }
                }
                Ok(())
            }
            TokKind::Str => {
                while self.peek()?.kind == TokKind::Str {
                    self.next()?;
                }
                Ok(())
            }
            TokKind::Number | TokKind::Ident => Ok(()),
            _ => Err(err(
                &first,
                format!("Expected a value, saw '{}'", first.text),
            )),
        }
    }
}

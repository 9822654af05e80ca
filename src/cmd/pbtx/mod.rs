//! Protobuf text format ("pbtx") to binary proto, driven only by the schema
//! table in [`crate::schema`]. Used for `perfetto --txt` configs.
//!
//! Accepts what Perfetto's parser accepts and a little more:
//! * `# comments`, `field: value`, `field value`, `field { ... }`,
//!   `field: { ... }`, `field < ... >`, optional `;` or `,` after a value;
//! * repeated fields by repetition or as a list `field: [a, b]`;
//! * strings in double or single quotes with C escapes (`\n \t \\ \" \'
//!   \xHH \ooo` ...); adjacent strings are concatenated;
//! * integers in decimal or `0x` hex, with sign; leading zeros are decimal
//!   (as in Perfetto, no octal); range-checked per field type;
//! * floats (`1.5`, `1e-3`, `inf`, `nan`), bools (`true/false`, `True/False`,
//!   `t/f`, `1/0`), enums by name or by number.
//!
//! Strict by default: unknown fields and enum values are errors with a
//! "did you mean" hint; with [`ParseOptions::allow_unknown`] they are
//! dropped (`--txt-lossy`). Fields declared `[packed = true]` are written
//! packed. Nested messages get 4-byte lengths, like Perfetto's encoder.

mod error;
mod lexer;
mod parser;
mod scalar;

pub use error::PbtxError;

/// Largest accepted input. Keeps every nested message far below the
/// 256 MiB limit of a 4-byte length (output is < 4x the input size).
pub const MAX_INPUT_BYTES: usize = 16 << 20;

/// Root message of `perfetto --txt` configs.
pub const TRACE_CONFIG: &str = "perfetto.protos.TraceConfig";

#[derive(Debug, Default, Clone, Copy)]
pub struct ParseOptions {
    /// Drop unknown fields and enum values instead of failing.
    pub allow_unknown: bool,
}

/// Parses `text` as message `root` (a full name such as
/// `perfetto.protos.TraceConfig`) and returns its binary encoding.
/// `file_name` only appears in error messages.
pub fn text_to_proto(
    root: &str,
    file_name: &str,
    text: &str,
    opts: ParseOptions,
) -> Result<Vec<u8>, PbtxError> {
    let fail =
        |msg: String| Err(PbtxError::new(1, 1, String::new(), msg).with_source(file_name, ""));
    let Some(desc) = crate::schema::message(root) else {
        return fail(format!("Unknown message type {root}"));
    };
    if text.len() > MAX_INPUT_BYTES {
        return fail(format!(
            "Input too large ({} bytes, max {MAX_INPUT_BYTES})",
            text.len()
        ));
    }
    let mut parser = parser::Parser::new(text, opts);
    match parser.parse_body(desc, None) {
        Ok(()) => Ok(parser.out.into_bytes()),
        Err(e) => Err(e.with_source(file_name, text)),
    }
}

/// Strict TraceConfig parsing, as `perfetto --txt` does.
pub fn trace_config_txt_to_pb(file_name: &str, text: &str) -> Result<Vec<u8>, PbtxError> {
    text_to_proto(TRACE_CONFIG, file_name, text, ParseOptions::default())
}

/// Like [`text_to_proto`] for raw file contents (e.g. `perfetto -c FILE
/// --txt`): input that is not UTF-8 is an error pointing at the first bad
/// byte.
pub fn bytes_to_proto(
    root: &str,
    file_name: &str,
    bytes: &[u8],
    opts: ParseOptions,
) -> Result<Vec<u8>, PbtxError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => text_to_proto(root, file_name, text, opts),
        Err(e) => {
            let good = &bytes[..e.valid_up_to()];
            let line = 1 + good.iter().filter(|&&b| b == b'\n').count();
            let line_start = good.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
            let col = good.len() - line_start + 1;
            let bad = format!("\\x{:02x}", bytes[e.valid_up_to()]);
            let msg = "Input is not valid UTF-8".to_string();
            let text = String::from_utf8_lossy(bytes);
            Err(PbtxError::new(line, col, bad, msg).with_source(file_name, &text))
        }
    }
}

/// True if `bytes` look like a text config given where a binary one was
/// expected: non-empty and every byte printable ASCII or whitespace. Used
/// for the "try --txt" hint.
pub fn looks_like_text(bytes: &[u8]) -> bool {
    !bytes.is_empty()
        && bytes
            .iter()
            .all(|&b| (0x20..0x7f).contains(&b) || b"\t\n\x0b\x0c\r".contains(&b))
}

#[cfg(test)]
mod tests;

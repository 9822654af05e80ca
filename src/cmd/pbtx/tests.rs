//! Parser tests: exact encodings, error messages and lossy mode.

use super::*;
use crate::pb::protos::TraceConfig;
use quick_protobuf::{BytesReader, MessageRead};

fn tc(text: &str) -> Result<Vec<u8>, PbtxError> {
    trace_config_txt_to_pb("cfg.pbtx", text)
}

fn decode(bytes: &[u8]) -> TraceConfig {
    TraceConfig::from_reader(&mut BytesReader::from_bytes(bytes), bytes).unwrap()
}

fn error(text: &str) -> PbtxError {
    tc(text).expect_err(text)
}

#[test]
fn exact_bytes() {
    // duration_ms (3) = 1000; buffers (1) { size_kb (1) = 4 } with a
    // 4-byte length, as Perfetto's encoder writes it.
    let b = tc("duration_ms: 1000 buffers { size_kb: 4 }").unwrap();
    assert_eq!(
        b,
        [0x18, 0xe8, 0x07, 0x0a, 0x82, 0x80, 0x80, 0x00, 0x08, 0x04]
    );
    // Negative int32 is sign-extended to ten bytes.
    let b = tc("bugreport_score: -1").unwrap();
    assert_eq!(b.len(), 1 + 1 + 10);
    assert_eq!(decode(&b).bugreport_score, Some(-1));
    // Empty input is an empty message.
    assert_eq!(tc("  # nothing\n").unwrap(), Vec::<u8>::new());
}

#[test]
fn syntax_variants_agree() {
    let want = tc("buffers { size_kb: 1 fill_policy: DISCARD } duration_ms: 5").unwrap();
    for text in [
        "buffers: { size_kb: 1; fill_policy: DISCARD }; duration_ms: 5",
        "buffers < size_kb: 1, fill_policy: 2 > duration_ms 5",
        "buffers {size_kb:0x1 fill_policy:DISCARD}duration_ms:5#c",
        "buffers: [{ size_kb: 1 fill_policy: DISCARD }] duration_ms: +5",
    ] {
        assert_eq!(tc(text).unwrap(), want, "{text}");
    }
}

#[test]
fn strings_and_bools() {
    let b = tc(r#"unique_session_name: "a\"b" 'c\x41' "\101"  write_into_file: t"#).unwrap();
    let c = decode(&b);
    assert_eq!(c.unique_session_name.as_deref(), Some("a\"bcAA"));
    assert_eq!(c.write_into_file, Some(true));
    for (v, want) in [("true", true), ("False", false), ("1", true), ("0", false)] {
        let c = decode(&tc(&format!("write_into_file: {v}")).unwrap());
        assert_eq!(c.write_into_file, Some(want), "{v}");
    }
}

#[test]
fn packed_fields_are_packed() {
    let b = text_to_proto(
        "perfetto.protos.TraceStats.WriterStats",
        "x",
        "chunk_payload_histogram_counts: 1 chunk_payload_histogram_counts: [300, 2]",
        ParseOptions::default(),
    )
    .unwrap();
    // field 2, wire type 2, length 4: 1, 300 (2 bytes), 2.
    assert_eq!(b, [0x12, 0x04, 0x01, 0xac, 0x02, 0x02]);
}

#[test]
fn unknown_field_suggests() {
    let e = error("duration_ms: 1\n  bufers { size_kb: 1 }");
    assert_eq!((e.line, e.col, e.token.as_str()), (2, 3, "bufers"));
    assert_eq!(
        e.message,
        "No field named \"bufers\" in proto TraceConfig. Did you mean \"buffers\"?"
    );
    assert_eq!(
        e.to_string(),
        "cfg.pbtx:2:3 error: No field named \"bufers\" in proto TraceConfig. \
         Did you mean \"buffers\"?\n  bufers { size_kb: 1 }\n  ^~~~~~"
    );
    let e = error("data_sources { config { name: \"x\" ftrace_config { ftrace_event: \"a\" } } }");
    assert!(
        e.message
            .contains("in proto FtraceConfig. Did you mean \"ftrace_events\"?"),
        "{e}"
    );
    let e = error("trigger_timeout_ms: 1");
    assert!(e
        .message
        .starts_with("No field named \"trigger_timeout_ms\" in proto TraceConfig"));
}

#[test]
fn unknown_enum_suggests() {
    let e = error("buffers {\n size_kb: 1\n fill_policy: RING_BUFER\n}");
    assert_eq!((e.line, e.col, e.token.as_str()), (3, 15, "RING_BUFER"));
    assert_eq!(
        e.message,
        "Unexpected value 'RING_BUFER' for enum field fill_policy in proto BufferConfig. \
         Did you mean \"RING_BUFFER\"?"
    );
    assert!(error("buffers { fill_policy: 7 }")
        .message
        .contains("Unexpected value '7'"));
}

#[test]
fn type_and_range_errors() {
    let cases = [
        (
            "duration_ms: 4294967296",
            "out of range for uint32 field duration_ms",
        ),
        (
            "duration_ms: -1",
            "out of range for uint32 field duration_ms",
        ),
        ("bugreport_score: 2147483648", "out of range for int32"),
        (
            "duration_ms: 1.5",
            "Expected value of type uint32 for field duration_ms",
        ),
        ("duration_ms: \"10\"", "Expected value of type uint32"),
        ("duration_ms: 12abc", "Expected value of type uint32"),
        (
            "max_file_size_bytes: 99999999999999999999",
            "out of range for uint64",
        ),
        (
            "write_into_file: 2",
            "Expected 'true' or 'false' for boolean field write_into_file",
        ),
        ("write_into_file: yes", "Expected 'true' or 'false'"),
        (
            "buffers: 5",
            "Expected value of type message for field buffers",
        ),
        ("unique_session_name: abc", "Expected value of type string"),
        ("unique_session_name: \"\\xff\"", "not valid UTF-8"),
        (
            "duration_ms: 1 duration_ms: 2",
            "Saw non-repeating field 'duration_ms' more than once",
        ),
        ("duration_ms:", "Unexpected end of input"),
        ("buffers { size_kb: 1", "Nested message not closed"),
        ("buffers { size_kb: 1 }}", "Unmatched closing brace"),
        ("buffers { size_kb: 1 >", "Unmatched closing brace"),
        ("= 3", "Unexpected character '='"),
        ("{ }", "Expected a field name, saw '{'"),
        ("\"s\"", "Expected a field name"),
        ("duration_ms: 1 @", "Unexpected character '@'"),
        (
            "[ext.field]: 1",
            "No extension named \"ext.field\" registered",
        ),
        ("data_sources: [{}, 3]", "Expected value of type message"),
        ("data_sources: [{} {}]", "Expected ',' or ']'"),
    ];
    for (text, want) in cases {
        let e = error(text);
        assert!(e.message.contains(want), "{text}: got {e}");
        assert!(e.line >= 1 && e.col >= 1);
    }
    // The unclosed brace is reported where it opened.
    let e = error("duration_ms: 1\nbuffers {\n size_kb: 1\n");
    assert_eq!((e.line, e.col, e.token.as_str()), (2, 9, "{"));
}

#[test]
fn oneof_members_are_exclusive() {
    let base = "data_sources { config { name: \"f\" ftrace_config { print_filter { rules {";
    let ok = format!("{base} prefix: \"a\" allow: true }} }} }} }} }}");
    assert!(tc(&ok).is_ok(), "{:?}", tc(&ok));
    let bad = format!("{base} prefix: \"a\" atrace_msg {{ prefix: \"b\" }} }} }} }} }} }}");
    assert!(error(&bad).message.contains("members of the same oneof"));
}

#[test]
fn nesting_is_bounded() {
    // TestConfig has no recursion, so use lossy skipping of an unknown block
    // and a deep but valid path; neither may overflow the stack.
    let deep = format!("x {}{}", "{".repeat(100_000), "}".repeat(100_000));
    let opts = ParseOptions {
        allow_unknown: true,
    };
    assert_eq!(
        text_to_proto(TRACE_CONFIG, "f", &deep, opts).unwrap(),
        Vec::<u8>::new()
    );
    let unclosed = format!("x {}", "{".repeat(1000));
    assert!(text_to_proto(TRACE_CONFIG, "f", &unclosed, opts).is_err());
}

#[test]
fn lossy_mode_drops_unknowns() {
    let opts = ParseOptions {
        allow_unknown: true,
    };
    let text = "future_field: 3 buffers { size_kb: 2 fill_policy: NEW_POLICY } \
                future_msg { a: [1, 2] b { c: \"x\" 'y' } } [ext.x]: 1 duration_ms: 7";
    let b = text_to_proto(TRACE_CONFIG, "f", text, opts).unwrap();
    let c = decode(&b);
    assert_eq!(c.duration_ms, Some(7));
    assert_eq!(c.buffers[0].size_kb, Some(2));
    assert_eq!(c.buffers[0].fill_policy, None);
    // Still strict about syntax and types.
    assert!(text_to_proto(TRACE_CONFIG, "f", "duration_ms: \"x\"", opts).is_err());
}

#[test]
fn other_roots_and_bad_root() {
    let b = text_to_proto(
        "perfetto.protos.DataSourceConfig",
        "f",
        "name: \"n\"",
        ParseOptions::default(),
    )
    .unwrap();
    assert_eq!(b, [0x0a, 0x01, b'n']);
    let e = text_to_proto("perfetto.protos.Nope", "f", "", ParseOptions::default()).unwrap_err();
    assert!(e.message.contains("Unknown message type"));
    let big = " ".repeat(MAX_INPUT_BYTES + 1);
    assert!(tc(&big).unwrap_err().message.contains("too large"));
}

#[test]
fn text_detection() {
    assert!(looks_like_text(b"duration_ms: 100\n\tbuffers {}\r\n"));
    assert!(!looks_like_text(b""));
    assert!(!looks_like_text(&tc("duration_ms: 1000").unwrap()));
    assert!(!looks_like_text("caf\u{e9}".as_bytes()));
}

#[test]
fn raw_bytes_input() {
    let opts = ParseOptions::default();
    let b = bytes_to_proto(TRACE_CONFIG, "f", b"duration_ms: 3", opts).unwrap();
    assert_eq!(b, [0x18, 0x03]);
    let e = bytes_to_proto(TRACE_CONFIG, "f", b"duration_ms: 3\n  # caf\xe9\n", opts).unwrap_err();
    assert_eq!((e.line, e.col, e.token.as_str()), (2, 8, "\\xe9"));
    assert!(
        e.to_string()
            .starts_with("f:2:8 error: Input is not valid UTF-8"),
        "{e}"
    );
}

#[test]
fn compression_parses_zstd_levels_deflate_and_the_legacy_enum() {
    let c = decode(&tc("compression { zstd { level: 9 } deflate {} }").unwrap());
    let z = c.compression.as_ref().unwrap();
    assert_eq!(z.zstd.as_ref().unwrap().level, Some(9));
    assert!(z.deflate.is_some());
    let c = decode(&tc("compression { zstd { level: -5 } }").unwrap());
    assert_eq!(c.compression.unwrap().zstd.unwrap().level, Some(-5));
    let c = decode(&tc("compression { zstd {} }").unwrap());
    assert_eq!(c.compression.unwrap().zstd.unwrap().level, None);
    let c = decode(&tc("compression_type: COMPRESSION_TYPE_DEFLATE").unwrap());
    assert!(c.compression_type.is_some());
    // A level that is no int32 is the parser's clear error.
    let e = error("compression { zstd { level: 99999999999 } }").to_string();
    assert!(e.contains("level"), "{e}");
    let e = error("compression { lz4 {} }").to_string();
    assert!(e.contains("lz4"), "{e}");
}

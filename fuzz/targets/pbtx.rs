//! Text-format configs: strict and lossy, as TraceConfig. Must never panic.

use tracebox::cmd::pbtx::{text_to_proto, ParseOptions, TRACE_CONFIG};

/// One fuzz input (cargo-fuzz and the stable replay runner call this).
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for allow_unknown in [false, true] {
        let _ = text_to_proto(TRACE_CONFIG, "fuzz", text, ParseOptions { allow_unknown });
    }
}

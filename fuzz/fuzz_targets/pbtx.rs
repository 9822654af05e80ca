#![no_main]
//! Text-format configs: strict and lossy, as TraceConfig. Must never panic.

use libfuzzer_sys::fuzz_target;
use tracebox::cmd::pbtx::{text_to_proto, ParseOptions, TRACE_CONFIG};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for allow_unknown in [false, true] {
        let _ = text_to_proto(TRACE_CONFIG, "fuzz", text, ParseOptions { allow_unknown });
    }
});

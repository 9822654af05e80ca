#![no_main]
//! cargo-fuzz entry; the target itself is `targets/trace_filter.rs`, shared
//! with the stable replay runner (tests/fuzz_replay.rs).

#[path = "../targets/trace_filter.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));

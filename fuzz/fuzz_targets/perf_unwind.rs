#![no_main]
//! cargo-fuzz entry; the target itself is `targets/perf_unwind.rs`, shared
//! with the stable replay runner (tests/fuzz_replay.rs).

#[path = "../targets/perf_unwind.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));

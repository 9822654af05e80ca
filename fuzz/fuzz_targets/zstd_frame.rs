#![no_main]
//! cargo-fuzz entry; the target itself is `targets/zstd_frame.rs`, shared with the
//! stable replay runner (tests/fuzz_replay.rs).

#[path = "../targets/zstd_frame.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));

//! Untrusted zstd frames (`zstd_compressed_packets` of a trace file)
//! through the bounded decoder and through `decompress_packets` as the
//! readers call it: never more than the cap, never a panic; and any bytes
//! compressed by us at a level taken from the input come back whole.

use tracebox::codec::{self, zstd};

/// A small cap, so bombs in the corpus hit it quickly.
const LIMIT: usize = 1 << 20;

/// One fuzz input (cargo-fuzz and the stable replay runner call this).
pub fn run(data: &[u8]) {
    match zstd::decompress_with_limit(data, LIMIT) {
        Ok(out) => assert!(out.len() <= LIMIT),
        Err(e) => assert!(matches!(e, zstd::Error::TooBig | zstd::Error::Malformed)),
    }
    let via_field = codec::decompress_packets(codec::ZSTD_COMPRESSED_PACKETS, data, LIMIT);
    assert!(via_field.is_none_or(|v| v.len() <= LIMIT));
    // Levels -8..=23: fast modes, defaults, and past the maximum (clamped).
    let level = data.first().map_or(0, |&b| (b % 32) as i32 - 8);
    let z = zstd::compress(data, level);
    assert_eq!(zstd::decompress_with_limit(&z, data.len()).unwrap(), data);
}

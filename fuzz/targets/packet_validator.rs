//! A producer packet split in three slices at fuzzer-chosen points: the
//! verdict must not depend on where the slices are cut.

use tracebox::tracing::service::packet_validator::validate_packet;

/// One fuzz input (cargo-fuzz and the stable replay runner call this).
pub fn run(data: &[u8]) {
    let [a, b, pkt @ ..] = data else { return };
    let i = (*a as usize).min(pkt.len());
    let j = (i + *b as usize).min(pkt.len());
    let whole = validate_packet([pkt]);
    assert_eq!(validate_packet([&pkt[..i], &pkt[i..j], &pkt[j..]]), whole);
}

//! TraceConfig.trace_filter: the bytecode loader on raw bytes (checksum
//! path) and on the same words with a valid checksum (every later check),
//! then the packet filter with whatever loaded. Never panics; the output
//! is never longer than the input.
use tracebox::protozero::decode::read_varint;
use tracebox::protozero::encode_varint;
use tracebox::tracing::service::trace_filter::{bytecode::checksum, TraceFilter};

/// Input: `n`, then `2n` bytes of bytecode words, then one packet.
pub fn run(data: &[u8]) {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let (code, packet) = rest.split_at((n as usize * 2).min(rest.len()));
    let _ = TraceFilter::from_bytecode(code, code);
    let mut words = Vec::new();
    let mut r = code;
    while let Some((v, used)) = read_varint(r) {
        words.push(v as u32);
        r = &r[used..];
    }
    words.push(checksum(&words));
    let mut fixed = Vec::new();
    for w in words {
        let mut v = [0u8; 10];
        let k = encode_varint(w as u64, &mut v);
        fixed.extend_from_slice(&v[..k]);
    }
    if let Ok(f) = TraceFilter::from_bytecode(&fixed, &[]) {
        let mut out = Vec::new();
        if f.filter_packet(packet, &mut out).is_ok() {
            assert!(out.len() <= packet.len());
        }
    }
}

//! /proc/kallsyms text (the compact table must answer as the naive one)
//! and print_filter atrace matching.

use tracebox::traced_probes::ftrace::parse::ksyms::{rows_lookup, symbol_rows, KernelSymbols};
use tracebox::traced_probes::ftrace::parse::print_filter::PrintMatch;

/// One fuzz input (cargo-fuzz and the stable replay runner call this).
pub fn run(data: &[u8]) {
    let rows = symbol_rows(data);
    let k = KernelSymbols::from_rows(&rows);
    assert_eq!(k.len(), rows.len());
    let mut name = String::new();
    let probe = u64::from_le_bytes(
        data.get(..8)
            .and_then(|b| b.try_into().ok())
            .unwrap_or([0; 8]),
    );
    // Around every symbol (its padding, its start, just past it) and one
    // address taken from the input.
    let around = rows.iter().take(64).flat_map(|r| {
        [
            r.0.wrapping_sub(1),
            r.0,
            r.0.wrapping_add(15),
            r.0.wrapping_add(16),
        ]
    });
    for addr in around.chain([probe, 0, u64::MAX]) {
        assert_eq!(
            k.lookup_into(addr, &mut name),
            rows_lookup(&rows, addr),
            "{addr:x}"
        );
    }
    let m = PrintMatch::Atrace {
        kind: b"B".to_vec(),
        prefix: b"x".to_vec(),
    };
    let _ = m.matches(data);
}

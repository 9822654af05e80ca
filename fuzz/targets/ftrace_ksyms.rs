//! /proc/kallsyms text and print_filter atrace matching.

use tracebox::traced_probes::ftrace::parse::ksyms::KernelSymbols;
use tracebox::traced_probes::ftrace::parse::print_filter::PrintMatch;

/// One fuzz input (cargo-fuzz and the stable replay runner call this).
pub fn run(data: &[u8]) {
    let k = KernelSymbols::parse(&String::from_utf8_lossy(data));
    let _ = k.lookup(u64::from_le_bytes(
        data.get(..8)
            .and_then(|b| b.try_into().ok())
            .unwrap_or([0; 8]),
    ));
    let m = PrintMatch::Atrace {
        kind: b"B".to_vec(),
        prefix: b"x".to_vec(),
    };
    let _ = m.matches(data);
}

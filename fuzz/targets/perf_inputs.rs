//! traced_perf's parsers of untrusted bytes (first byte picks one): the
//! perf ring walk and record decoder, PerfEventConfig, ELF files (build
//! id notes, symbol tables and their size) and /proc/PID/maps text. Errors, never panics.

use tracebox::traced_perf::{config, elf, maps, records};

pub fn run(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    match sel % 4 {
        0 => {
            let mut scratch = Vec::new();
            let mut sample = records::Sample {
                group: sel & 4 != 0,
                ..Default::default()
            };
            let mut tail = 0u64;
            let head = rest.len() as u64;
            while let Some(r) = records::next(rest, tail, head, &mut scratch) {
                let len = r.len() as u64;
                let _ = records::parse(r, &mut sample);
                tail += len;
            }
            // The stop's header-only count, from an offset that wraps.
            let start = u64::from(sel) * 8;
            let _ = records::count_unread(rest, start, start + head);
            records::exec_comms_in(rest, start, start + head, |_, _| {});
        }
        1 => drop(config::parse(rest)),
        2 => {
            let _ = elf::symbol_table_bytes(rest);
            if let Some(info) = elf::parse(rest, true) {
                let _ = info.symbols.lookup(0x1000);
            }
        }
        _ => drop(maps::parse(&String::from_utf8_lossy(rest), 1000)),
    }
}

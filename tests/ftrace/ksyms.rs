//! `symbolize_ksyms` against the real kernel: symbol fields of events
//! resolve, through `interned_data.kernel_symbols`, to kallsyms names.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use quick_protobuf::{BytesReader, MessageRead};
use tracebox::pb::protos::mod_FtraceEvent::OneOfevent;
use tracebox::pb::protos::mod_TracePacket::OneOfdata;
use tracebox::pb::protos::TracePacket;
use tracebox::traced_probes::ftrace::cpu_reader::{FtraceReader, ReaderMode};
use tracebox::traced_probes::ftrace::ksyms_load::load_kallsyms;
use tracebox::traced_probes::ftrace::parse::bundle::{
    write_pages, BundleContext, CpuState, EventFilter,
};
use tracebox::traced_probes::ftrace::parse::ksyms::{
    rows_lookup, symbol_rows, KernelSymbols, LazySymbols,
};
use tracebox::traced_probes::ftrace::parse::translate::KernelAddrs;
use tracebox::traced_probes::ftrace::Tracefs;

use crate::support::ftrace as ftrace_common;
use ftrace_common::Packets;

const KPTR: &str = "/proc/sys/kernel/kptr_restrict";

/// Runs `f` in instance `name` with kptr_restrict 0, restoring both.
fn with_instance(name: &str, f: impl FnOnce(&Tracefs)) {
    let root = Tracefs::discover().expect("tracefs (tests run as root)");
    let kptr = std::fs::read_to_string(KPTR).unwrap();
    std::fs::write(KPTR, "0").unwrap();
    let _ = root.remove_instance(name);
    let t = root.create_instance(name).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&t)));
    root.remove_instance(name).expect("instance removable");
    std::fs::write(KPTR, kptr.trim()).unwrap();
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}

#[test]
fn workqueue_functions_resolve_to_kallsyms_names() {
    with_instance("tbx_test_ksyms", |t| {
        let text = std::fs::read_to_string("/proc/kallsyms").unwrap();
        let names: BTreeSet<&str> = text
            .lines()
            .filter_map(|l| l.split_ascii_whitespace().nth(2))
            .collect();
        let ksyms = load_kallsyms().unwrap();
        assert!(
            ksyms.len() > 1000,
            "kallsyms has {} text symbols",
            ksyms.len()
        );

        let lazy = LazySymbols::ready(ksyms);
        t.set_buffer_size_kb(1024).unwrap();
        t.enable_event("workqueue", "workqueue_execute_start")
            .unwrap();
        let layout = t.page_header_layout();
        let table = t.translation_table();
        let mut filter = EventFilter::default();
        let ev = table
            .event_by_name("workqueue", "workqueue_execute_start")
            .unwrap();
        filter.enable(ev.ftrace_id);
        let ctx = BundleContext {
            table: &table,
            filter: &filter,
            compact_sched: None,
            sched_switch: None,
            clock: None,
            ksyms: Some(&lazy),
        };
        let mut reader = FtraceReader::start(
            t,
            layout.page_size,
            Duration::from_millis(20),
            ReaderMode::Read,
        )
        .unwrap();
        // One sequence for all cpus, as traced_probes does.
        let shared = KernelAddrs::shared();
        let mut states: Vec<CpuState> = (0..reader.num_cpus())
            .map(|_| CpuState::on_sequence(&shared))
            .collect();
        let mut out = Packets::default();
        let mut consume = |cpu: usize, pages: &[u8]| {
            write_pages(&mut out, cpu as u32, pages, &layout, &ctx, &mut states[cpu]);
        };
        t.set_tracing_on(true).unwrap();
        // Work items run all the time; sync and a few drains add more.
        for _ in 0..5 {
            nix::unistd::sync();
            std::thread::sleep(Duration::from_millis(50));
            reader.drain(&mut consume).unwrap();
        }
        reader.flush(&mut consume).unwrap();
        t.set_tracing_on(false).unwrap();

        let mut interned: BTreeMap<u64, String> = BTreeMap::new();
        let mut flags = Vec::new();
        let mut functions = Vec::new();
        for b in &out.done {
            let p = TracePacket::from_reader(&mut BytesReader::from_bytes(b), b).unwrap();
            if let Some(d) = &p.interned_data {
                flags.push(p.sequence_flags);
                for s in &d.kernel_symbols {
                    let name = String::from_utf8(s.str_pb.clone().unwrap()).unwrap();
                    let iid = s.iid.unwrap();
                    assert!(interned.insert(iid, name).is_none(), "iid {iid} twice");
                }
            }
            let OneOfdata::ftrace_events(bundle) = p.data else {
                panic!("not a bundle")
            };
            for e in bundle.event {
                if let OneOfevent::workqueue_execute_start(w) = e.event {
                    functions.push(w.function.unwrap());
                }
            }
        }
        assert!(!functions.is_empty(), "no workqueue_execute_start events");
        assert_eq!(
            flags.first(),
            Some(&Some(1)),
            "first: incremental state cleared"
        );
        assert!(flags[1..].iter().all(|f| *f == Some(2)), "{flags:?}");
        for f in &functions {
            let name = interned
                .get(f)
                .unwrap_or_else(|| panic!("iid {f} not interned"));
            assert!(names.contains(name.as_str()), "{name} not in kallsyms");
        }
        eprintln!(
            "{} events, {} symbols, e.g. {:?}",
            functions.len(),
            interned.len(),
            interned.values().take(3).collect::<Vec<_>>()
        );
    });
}

/// Runs `f` with kptr_restrict 0 (real addresses in kallsyms), restoring it.
fn with_addresses(f: impl FnOnce()) {
    let kptr = std::fs::read_to_string(KPTR).unwrap();
    std::fs::write(KPTR, "0").unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::fs::write(KPTR, kptr.trim()).unwrap();
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}

#[test]
fn the_compact_table_answers_as_the_naive_one_on_this_kernel() {
    with_addresses(|| {
        let text = std::fs::read("/proc/kallsyms").unwrap();
        let rows = symbol_rows(&text);
        let k = KernelSymbols::from_rows(&rows);
        assert!(
            rows.len() > 1000,
            "kallsyms has {} text symbols",
            rows.len()
        );
        assert_eq!(k.len(), rows.len());
        let mut name = String::new();
        let first = rows[0].0;
        for (i, &(a, _)) in rows.iter().enumerate() {
            let next = rows.get(i + 1).map_or(a.saturating_add(64), |r| r.0);
            for addr in [a.wrapping_sub(1), a, a + (next - a) / 2, next - 1] {
                assert_eq!(
                    k.lookup_into(addr, &mut name),
                    rows_lookup(&rows, addr),
                    "{addr:x}"
                );
            }
        }
        assert_eq!(k.lookup_into(first - 1, &mut name), None);
        // The naive table held 8 bytes of address, a 4-byte offset and the
        // name (~25 bytes) per symbol.
        let bytes = k.mem_bytes();
        eprintln!(
            "{} symbols in {bytes} bytes ({:.2} per symbol)",
            k.len(),
            bytes as f64 / k.len() as f64
        );
        assert!(bytes < k.len() * 8, "{bytes} bytes for {} symbols", k.len());
    });
}

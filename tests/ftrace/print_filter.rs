//! `print_filter` against the real kernel: markers written to a private
//! instance are kept or dropped by the first matching rule.

use std::time::Duration;

use quick_protobuf::{BytesReader, MessageRead};
use tracebox::pb::protos::mod_FtraceEvent::OneOfevent;
use tracebox::pb::protos::mod_TracePacket::OneOfdata;
use tracebox::pb::protos::TracePacket;
use tracebox::traced_probes::ftrace::cpu_reader::{FtraceReader, ReaderMode};
use tracebox::traced_probes::ftrace::parse::bundle::{
    write_pages, BundleContext, CpuState, EventFilter,
};
use tracebox::traced_probes::ftrace::parse::print_filter::{PrintFilter, PrintMatch, PrintRule};
use tracebox::traced_probes::ftrace::Tracefs;

use crate::support::ftrace as ftrace_common;
use ftrace_common::Packets;

#[test]
fn markers_are_kept_or_dropped_by_the_first_matching_rule() {
    let name = "tbx_test_print_filter";
    let root = Tracefs::discover().expect("tracefs (tests run as root)");
    let _ = root.remove_instance(name);
    let t = root.create_instance(name).unwrap();
    let r = std::panic::catch_unwind(|| run(&t));
    root.remove_instance(name).expect("instance removable");
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}

fn run(t: &Tracefs) {
    let layout = t.page_header_layout();
    let table = t.translation_table();
    let mut filter = EventFilter::default();
    filter.enable(table.event_by_name("ftrace", "print").unwrap().ftrace_id);
    let rule = |matcher, allow| PrintRule { matcher, allow };
    filter.print = Some(PrintFilter {
        rules: vec![
            rule(PrintMatch::Prefix(b"tbx-keep".to_vec()), true),
            rule(PrintMatch::Prefix(b"tbx-".to_vec()), false),
            rule(
                PrintMatch::Atrace {
                    kind: b"B".to_vec(),
                    prefix: b"noisy".to_vec(),
                },
                false,
            ),
        ],
    });
    let ctx = BundleContext {
        table: &table,
        filter: &filter,
        compact_sched: None,
        sched_switch: None,
        clock: None,
        ksyms: None,
    };
    let mut reader = FtraceReader::start(
        t,
        layout.page_size,
        Duration::from_millis(20),
        ReaderMode::Read,
    )
    .unwrap();
    let mut states: Vec<CpuState> = (0..reader.num_cpus())
        .map(|_| CpuState::default())
        .collect();
    let mut out = Packets::default();
    t.set_tracing_on(true).unwrap();
    let written = [
        "tbx-keep one",
        "tbx-drop two",
        "B|42|noisy slice",
        "B|42|useful slice",
        "E|42",
        "other text",
        "tbx-keep three",
    ];
    for m in written {
        std::fs::write(t.path("trace_marker"), m).unwrap();
    }
    reader
        .flush(&mut |cpu: usize, pages: &[u8]| {
            write_pages(&mut out, cpu as u32, pages, &layout, &ctx, &mut states[cpu]);
        })
        .unwrap();
    t.set_tracing_on(false).unwrap();

    let mut got: Vec<(u64, String)> = Vec::new();
    for b in &out.done {
        let p = TracePacket::from_reader(&mut BytesReader::from_bytes(b), b).unwrap();
        let OneOfdata::ftrace_events(bundle) = p.data else {
            panic!("not a bundle")
        };
        for e in bundle.event {
            if let OneOfevent::print(p) = e.event {
                let buf = p.buf.unwrap_or_default();
                got.push((e.timestamp.unwrap(), buf.trim_end().to_string()));
            }
        }
    }
    got.sort();
    let got: Vec<String> = got.into_iter().map(|g| g.1).collect();
    assert_eq!(
        got,
        [
            "tbx-keep one",
            "B|42|useful slice",
            "E|42",
            "other text",
            "tbx-keep three"
        ]
    );
}

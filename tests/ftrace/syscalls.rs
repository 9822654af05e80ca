//! `syscall_events` against the real kernel: raw_syscalls in a private
//! instance, filtered to the requested numbers, decode as typed events.

use std::time::Duration;

use quick_protobuf::{BytesReader, MessageRead};
use tracebox::pb::protos::mod_FtraceEvent::OneOfevent;
use tracebox::pb::protos::mod_TracePacket::OneOfdata;
use tracebox::pb::protos::TracePacket;
use tracebox::traced_probes::ftrace::cpu_reader::{FtraceReader, ReaderMode};
use tracebox::traced_probes::ftrace::parse::bundle::{
    write_pages, BundleContext, CpuState, EventFilter,
};
use tracebox::traced_probes::ftrace::parse::syscalls;
use tracebox::traced_probes::ftrace::Tracefs;

use crate::support::ftrace as ftrace_common;
use ftrace_common::Packets;

#[test]
fn getpid_calls_are_traced_and_nothing_else() {
    let name = "tbx_test_syscalls";
    let root = Tracefs::discover().expect("tracefs (tests run as root)");
    let _ = root.remove_instance(name);
    let t = root.create_instance(name).unwrap();
    let r = std::panic::catch_unwind(|| run(&t));
    let _ = t.set_event_filter("raw_syscalls", None, "0");
    root.remove_instance(name).expect("instance removable");
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}

fn run(t: &Tracefs) {
    let (ids, unknown) = syscalls::resolve(&["getpid".to_string()]);
    assert!(unknown.is_empty());
    let getpid = ids[0];
    let expr = syscalls::filter_expr(&ids);
    let layout = t.page_header_layout();
    let table = t.translation_table();
    let mut filter = EventFilter::default();
    for n in ["sys_enter", "sys_exit"] {
        t.set_event_filter("raw_syscalls", Some(n), &expr).unwrap();
        t.enable_event("raw_syscalls", n).unwrap();
        filter.enable(table.event_by_name("raw_syscalls", n).unwrap().ftrace_id);
    }
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
    for _ in 0..10 {
        nix::unistd::getpid();
        // Other syscalls, which the filter must drop.
        let _ = std::fs::metadata("/");
    }
    t.set_tracing_on(false).unwrap();
    reader
        .flush(&mut |cpu: usize, pages: &[u8]| {
            write_pages(&mut out, cpu as u32, pages, &layout, &ctx, &mut states[cpu]);
        })
        .unwrap();

    let me = nix::unistd::gettid().as_raw() as u32; // tests run on threads
    let (mut enters, mut exits, mut mine) = (0, 0, 0);
    for b in &out.done {
        let p = TracePacket::from_reader(&mut BytesReader::from_bytes(b), b).unwrap();
        let OneOfdata::ftrace_events(bundle) = p.data else {
            panic!("not a bundle")
        };
        for e in bundle.event {
            match e.event {
                OneOfevent::sys_enter(s) => {
                    assert_eq!(s.id, Some(getpid as i64));
                    enters += 1;
                    if e.pid == Some(me) {
                        mine += 1;
                    }
                }
                OneOfevent::sys_exit(s) => {
                    assert_eq!(s.id, Some(getpid as i64));
                    exits += 1;
                }
                other => panic!("unexpected event {other:?}"),
            }
        }
    }
    assert!(mine >= 10, "{mine} of our getpid calls (enters {enters})");
    assert!(exits >= 10, "{exits} exits");
}

//! Kprobe and function_graph records, laid out as Debian's 6.1 kernel
//! writes them (its format files are in tests/data/ftrace-formats),
//! become upstream's `kprobe_event` and `funcgraph_entry`/`_exit`.

use std::path::Path;

use quick_protobuf::{BytesReader, MessageRead};
use tracebox::pb::protos::mod_FtraceEvent::OneOfevent;
use tracebox::pb::protos::mod_KprobeEvent::KprobeType;
use tracebox::pb::protos::mod_TracePacket::OneOfdata;
use tracebox::pb::protos::{FtraceEvent, TracePacket};
use tracebox::traced_probes::ftrace::parse::bundle::{write_pages, CpuState, EventFilter};
use tracebox::traced_probes::ftrace::parse::format::parse_header_page;
use tracebox::traced_probes::ftrace::parse::kprobes::TraceType;
use tracebox::traced_probes::ftrace::parse::translate::TranslationTable;

use crate::support::ftrace::Packets;

const DEBIAN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/ftrace-formats/debian_6.1.0-56-amd64/events"
);

/// `pages` through the translator with Debian's page header; both of its
/// records become events, with no errors.
fn translate(
    pages: &[u8],
    table: &TranslationTable,
    filter: &EventFilter,
    state: &mut CpuState,
) -> Packets {
    let layout =
        parse_header_page(&std::fs::read_to_string(Path::new(DEBIAN).join("header_page")).unwrap())
            .unwrap();
    let ctx = crate::bundle::plain_ctx(table, filter);
    let mut out = Packets::default();
    let sum = write_pages(&mut out, 0, pages, &layout, &ctx, state);
    assert_eq!((sum.events, sum.errors), (2, 0));
    out
}

fn format(rel: &str) -> String {
    std::fs::read_to_string(Path::new(DEBIAN).join(rel).join("format")).unwrap()
}

/// One ring-buffer page: records of `(delta, payload)` (payload starts
/// with the common fields; padded to words).
fn page(records: &[(u32, Vec<u8>)]) -> Vec<u8> {
    let mut data = Vec::new();
    for (delta, payload) in records {
        let mut p = payload.clone();
        p.resize(p.len().div_ceil(4) * 4, 0);
        let words = (p.len() / 4) as u32;
        assert!((1..=28).contains(&words));
        data.extend_from_slice(&(words | (delta << 5)).to_le_bytes());
        data.extend_from_slice(&p);
    }
    let mut page = vec![0u8; 4096];
    page[..8].copy_from_slice(&1_000u64.to_le_bytes());
    page[8..16].copy_from_slice(&(data.len() as u64).to_le_bytes());
    page[16..16 + data.len()].copy_from_slice(&data);
    page
}

fn common(id: u16, pid: i32) -> Vec<u8> {
    let mut r = id.to_le_bytes().to_vec();
    r.extend_from_slice(&[0, 0]);
    r.extend_from_slice(&pid.to_le_bytes());
    r
}

fn events(out: &Packets) -> Vec<FtraceEvent> {
    out.done
        .iter()
        .flat_map(|b| {
            let pkt = TracePacket::from_reader(&mut BytesReader::from_bytes(b), b).unwrap();
            match pkt.data {
                OneOfdata::ftrace_events(b) => b.event,
                _ => panic!("not a bundle"),
            }
        })
        .collect()
}

#[test]
fn kprobes_are_written_as_upstream_kprobe_events() {
    let mut table = TranslationTable::default();
    let entry = table
        .add_kprobe(
            "perfetto_kprobes_7",
            "do_sys_openat2",
            &format("perfetto_kprobes/do_sys_openat2"),
        )
        .unwrap();
    let exit = table
        .add_kprobe(
            "perfetto_kretprobes_7",
            "do_sys_openat2",
            &format("perfetto_kretprobes/do_sys_openat2"),
        )
        .unwrap();
    assert_eq!((entry, exit), (1338, 1339));
    let mut filter = EventFilter::default();
    filter.enable(entry);
    filter.enable(exit);
    filter.kprobes = vec![(entry, TraceType::Begin), (exit, TraceType::End)];
    let mut probe = common(1338, 42);
    probe.extend_from_slice(&0xffff_ffff_8123_4567u64.to_le_bytes());
    let mut ret = common(1339, 42);
    ret.extend_from_slice(&[0x11; 16]);
    let pg = page(&[(5, probe), (7, ret)]);
    let out = translate(&pg, &table, &filter, &mut CpuState::default());
    let got: Vec<_> = events(&out)
        .into_iter()
        .map(|e| match e.event {
            OneOfevent::kprobe_event(k) => (e.timestamp, e.pid, k.name, k.type_pb),
            other => panic!("{other:?}"),
        })
        .collect();
    let name = Some("do_sys_openat2".to_string());
    assert_eq!(
        got,
        [
            (
                Some(1005),
                Some(42),
                name.clone(),
                Some(KprobeType::KPROBE_TYPE_BEGIN)
            ),
            (
                Some(1012),
                Some(42),
                name,
                Some(KprobeType::KPROBE_TYPE_END)
            ),
        ]
    );
}

#[test]
fn funcgraph_records_become_entry_and_exit_events() {
    let table = TranslationTable::build(&|g, n| match (g, n) {
        ("ftrace", "funcgraph_entry" | "funcgraph_exit") => Some(format(&format!("{g}/{n}"))),
        _ => None,
    });
    let mut filter = EventFilter::default();
    filter.enable(10);
    filter.enable(11);
    let func = 0xffff_ffff_8100_1000u64;
    let mut entry = common(11, 9);
    entry.extend_from_slice(&func.to_le_bytes());
    entry.extend_from_slice(&3i32.to_le_bytes());
    let mut exit = common(10, 9);
    exit.extend_from_slice(&func.to_le_bytes());
    exit.extend_from_slice(&3i32.to_le_bytes());
    exit.extend_from_slice(&0u32.to_le_bytes());
    exit.extend_from_slice(&500u64.to_le_bytes());
    exit.extend_from_slice(&900u64.to_le_bytes());
    let pg = page(&[(1, entry), (2, exit)]);
    let mut state = CpuState::default();
    let out = translate(&pg, &table, &filter, &mut state);
    let ev = events(&out);
    // The function is a kernel address: interned as upstream does (index
    // 1 of the sequence's kernel symbols), never the raw address.
    match &ev[0].event {
        OneOfevent::funcgraph_entry(f) => assert_eq!((f.depth, f.func), (Some(3), Some(1))),
        other => panic!("{other:?}"),
    }
    match &ev[1].event {
        OneOfevent::funcgraph_exit(f) => assert_eq!(
            (f.depth, f.func, f.calltime, f.rettime, f.overrun),
            (Some(3), Some(1), Some(500), Some(900), Some(0))
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(state.metadata.kernel.borrow().addrs, [func]);
}

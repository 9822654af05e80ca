//! Bundle encoding of the captured pages (see tests/ftrace_pages.rs),
//! decoded back with the pb-rs types.

use quick_protobuf::{BytesReader, MessageRead};
use tracebox::pb::protos::mod_FtraceEvent::OneOfevent;
use tracebox::pb::protos::mod_GenericFtraceEvent::mod_Field::OneOfvalue;
use tracebox::pb::protos::mod_TracePacket::OneOfdata;
use tracebox::pb::protos::{FtraceEventBundle, TracePacket};
use tracebox::protozero::decode::{read_varint, FieldIter};
use tracebox::protozero::VecStream;
use tracebox::schema::trace_extensions;
use tracebox::traced_probes::ftrace::parse::bundle::{
    write_pages, BundleContext, ClockSnapshot, CpuState, EventFilter,
};
use tracebox::traced_probes::ftrace::parse::compact_sched::{self, CompactSchedFormat};
use tracebox::traced_probes::ftrace::parse::format::{
    parse_format, parse_header_page, PageHeaderLayout,
};
use tracebox::traced_probes::ftrace::parse::page_parser::{parse_page, PageSink, ParseError};
use tracebox::traced_probes::ftrace::parse::stats::{
    write_ftrace_stats, CpuStats, Phase, StatsSnapshot,
};
use tracebox::traced_probes::ftrace::parse::translate::TranslationTable;

const CPU0: &[u8] = include_bytes!("../data/ftrace-pages/cpu0.pages");
const MARKERS: &str = include_str!("../data/ftrace-pages/markers.txt");
const PRINT: &str = include_str!("../data/ftrace-pages/print.format");
const SWITCH: &str = include_str!("../data/ftrace-pages/sched_switch.format");
const WAKING: &str = include_str!("../data/ftrace-pages/sched_waking.format");
const HEADER_PAGE: &str = include_str!("../data/ftrace-pages/header_page");

use crate::support::ftrace as ftrace_common;
use ftrace_common::Packets;

fn bundles(p: &Packets) -> Vec<FtraceEventBundle> {
    assert!(p.cur.is_none(), "packet left open");
    p.done
        .iter()
        .map(|b| {
            let pkt = TracePacket::from_reader(&mut BytesReader::from_bytes(b), b).unwrap();
            match pkt.data {
                OneOfdata::ftrace_events(b) => b,
                _ => panic!("not a bundle"),
            }
        })
        .collect()
}

fn fixture_table(with_print: bool) -> TranslationTable {
    TranslationTable::build(&|g, n| match (g, n) {
        ("ftrace", "print") if with_print => Some(PRINT.to_string()),
        ("sched", "sched_switch") => Some(SWITCH.to_string()),
        ("sched", "sched_waking") => Some(WAKING.to_string()),
        _ => None,
    })
}

/// The fixture's sched formats, which compact sched accepts.
fn fixture_compact() -> CompactSchedFormat {
    compact_sched::validate(
        &parse_format(SWITCH).unwrap(),
        &parse_format(WAKING).unwrap(),
    )
    .expect("this kernel's sched formats are compact-compatible")
}

fn layout() -> PageHeaderLayout {
    parse_header_page(HEADER_PAGE).unwrap()
}

fn all_ids(t: &TranslationTable) -> EventFilter {
    let mut f = EventFilter::default();
    for e in t.events() {
        f.enable(e.ftrace_id);
    }
    f
}

/// Full events only: no compact sched, boot clock, no symbols.
pub(crate) fn plain_ctx<'a>(
    table: &'a TranslationTable,
    filter: &'a EventFilter,
) -> BundleContext<'a> {
    BundleContext {
        table,
        filter,
        compact_sched: None,
        sched_switch: None,
        clock: None,
        ksyms: None,
    }
}

fn expected_markers() -> Vec<String> {
    MARKERS.lines().map(|m| format!("{m}\n")).collect()
}

#[test]
fn full_events() {
    let table = fixture_table(true);
    let filter = all_ids(&table);
    let ctx = plain_ctx(&table, &filter);
    let mut state = CpuState::default();
    let mut out = Packets::default();
    let sum = write_pages(&mut out, 0, CPU0, &layout(), &ctx, &mut state);
    assert_eq!(
        (sum.pages, sum.events, sum.bundles, sum.errors),
        (2, 115, 1, 0)
    );
    let b = &bundles(&out)[0];
    assert_eq!(b.cpu, Some(0));
    assert_eq!(b.previous_bundle_end_timestamp, Some(0));
    assert_eq!(b.lost_events, None);
    assert_eq!(b.event.len(), 115);
    let mut markers = vec![];
    let mut switches = 0;
    let mut last_ts = 0;
    for e in &b.event {
        let ts = e.timestamp.unwrap();
        assert!(ts >= last_ts);
        last_ts = ts;
        match &e.event {
            OneOfevent::print(p) => {
                markers.push(p.buf.clone().unwrap());
                assert!(p.ip.is_none(), "ip is skipped by event_map.txt");
                assert!(e.pid.unwrap() > 0);
            }
            OneOfevent::sched_switch(s) => {
                switches += 1;
                assert!(s.prev_comm.is_some() && s.next_comm.is_some());
                assert_eq!(e.pid.unwrap() as i32, s.prev_pid.unwrap());
                assert!(s.prev_state.is_some() && s.next_prio.is_some());
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(markers, expected_markers());
    assert_eq!(switches, 55);
    assert_eq!(state.bundle_end_timestamp, last_ts);

    // A second pass continues from the last timestamp.
    let mut out2 = Packets::default();
    write_pages(&mut out2, 0, &CPU0[..4096], &layout(), &ctx, &mut state);
    assert_eq!(
        bundles(&out2)[0].previous_bundle_end_timestamp,
        Some(last_ts)
    );
}

/// Streams packets into a real TraceWriter, as traced_probes does.
struct WriterPackets<'a>(&'a mut tracebox::tracing::core::trace_writer::TraceWriter);

impl tracebox::traced_probes::ftrace::parse::bundle::PacketWriter for WriterPackets<'_> {
    type Stream = tracebox::tracing::core::trace_writer::TraceWriter;
    fn new_packet(&mut self) {
        self.0.begin_packet();
    }
    fn stream(&mut self) -> &mut Self::Stream {
        self.0
    }
    fn finish_packet(&mut self) {
        self.0.end_packet();
    }
}

/// Bundles streamed into 4 KiB shared-memory chunks (each spans several:
/// the bundle length is patched, packets fragment) reach the service as
/// the same bytes as encoded in memory, full events and compact sched.
#[test]
fn bundles_streamed_into_small_chunks_arrive_whole() {
    use std::sync::Arc;
    use tracebox::mem::shared_mem::SharedMem;
    use tracebox::tracing::core::arbiter::{Arbiter, ArbiterConfig, BufferExhaustedPolicy};
    use tracebox::tracing::core::smb_abi::SmbAbi;
    let table = fixture_table(true);
    let filter = all_ids(&table);
    let compact = fixture_compact();
    for compact_sched in [None, Some(compact)] {
        let ctx = BundleContext {
            compact_sched,
            sched_switch: Some(compact.switch),
            ..plain_ctx(&table, &filter)
        };
        // Three passes: bundles of 1, 2 and 8 pages.
        let big = CPU0.repeat(4);
        let passes = [&CPU0[..4096], CPU0, &big[..]];
        let mut want = Packets::default();
        let mut state = CpuState::default();
        for p in passes {
            write_pages(&mut want, 0, p, &layout(), &ctx, &mut state);
        }
        let abi = SmbAbi::new(Arc::new(SharedMem::new_heap(64 * 4096).unwrap()), 4096).unwrap();
        let transport = crate::support::common::fake_service::TestTransport::new(abi.clone(), true);
        let arbiter = Arbiter::new(abi, ArbiterConfig::default(), transport.clone());
        let mut w = arbiter
            .create_trace_writer(1, BufferExhaustedPolicy::Stall)
            .unwrap();
        w.set_emit_sequence_markers(false);
        let mut state = CpuState::default();
        for p in passes {
            write_pages(
                &mut WriterPackets(&mut w),
                0,
                p,
                &layout(),
                &ctx,
                &mut state,
            );
        }
        w.flush();
        assert_eq!(w.stats().packets_written, 3);
        let svc = transport.service.lock().unwrap();
        assert_eq!(svc.packets(w.writer_id()), &want.done[..]);
        assert!(want.done.iter().any(|b| b.len() > 4096), "spans chunks");
        if compact_sched.is_none() {
            assert!(arbiter.stats().patches_sent > 0, "bundle lengths patched");
        }
    }
}

#[test]
fn print_fast_path_writes_what_the_generic_path_writes() {
    let fast = fixture_table(true);
    assert!(fast.print_layout.is_some(), "the usual print layout");
    let mut generic = fixture_table(true);
    generic.print_layout = None;
    let encode = |table: &TranslationTable, pages: &[u8]| {
        let filter = all_ids(table);
        let ctx = plain_ctx(table, &filter);
        let mut state = CpuState::default();
        let mut out = Packets::default();
        let sum = write_pages(&mut out, 0, pages, &layout(), &ctx, &mut state);
        (out.done, sum, state.metadata.pids)
    };
    assert_eq!(encode(&fast, CPU0), encode(&generic, CPU0));
    // Records cut short or with garbage behave the same way too.
    let mut page = CPU0[..4096].to_vec();
    for i in (64..4096).step_by(97) {
        page[i] ^= 0x5a;
        assert_eq!(encode(&fast, &page), encode(&generic, &page), "flip at {i}");
    }
}

#[test]
fn compact_sched_matches_full_events() {
    let table = fixture_table(true);
    let filter = all_ids(&table);
    let compact = fixture_compact();
    let full_ctx = plain_ctx(&table, &filter);
    let ctx = BundleContext {
        compact_sched: Some(compact),
        sched_switch: Some(compact.switch),
        ..full_ctx
    };
    let clock = ClockSnapshot {
        ftrace_clock: 2,
        ftrace_timestamp: 5,
        boot_timestamp: 7,
    };
    let ctx = BundleContext {
        clock: Some(clock),
        ..ctx
    };

    let mut full = Packets::default();
    write_pages(
        &mut full,
        0,
        CPU0,
        &layout(),
        &full_ctx,
        &mut CpuState::default(),
    );
    let full = &bundles(&full)[0];
    let mut out = Packets::default();
    let sum = write_pages(&mut out, 0, CPU0, &layout(), &ctx, &mut CpuState::default());
    assert_eq!(sum.events, 115);
    let b = &bundles(&out)[0];
    assert_eq!((b.ftrace_timestamp, b.boot_timestamp), (Some(5), Some(7)));
    assert_eq!(b.event.len(), 60, "only prints stay full");
    let c = b.compact_sched.as_ref().unwrap();
    let mut ts = 0u64;
    let decoded: Vec<_> = (0..c.switch_timestamp.len())
        .map(|i| {
            ts += c.switch_timestamp[i];
            let comm = &c.intern_table[c.switch_next_comm_index[i] as usize];
            (
                ts,
                c.switch_next_pid[i],
                c.switch_next_prio[i],
                c.switch_prev_state[i],
                comm.clone(),
            )
        })
        .collect();
    let want: Vec<_> = full
        .event
        .iter()
        .filter_map(|e| match &e.event {
            OneOfevent::sched_switch(s) => Some((
                e.timestamp.unwrap(),
                s.next_pid.unwrap(),
                s.next_prio.unwrap(),
                s.prev_state.unwrap(),
                s.next_comm.clone().unwrap(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(decoded.len(), 55);
    assert_eq!(decoded, want);
    assert!(c.waking_timestamp.is_empty());
    let mut uniq = c.intern_table.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), c.intern_table.len());
}

/// Offsets (in `pages`) of the records of event `id`.
fn record_offsets(pages: &[u8], layout: &PageHeaderLayout, id: u32) -> Vec<usize> {
    struct Sink {
        base: usize,
        id: u32,
        at: Vec<usize>,
    }
    impl PageSink for Sink {
        fn on_event(&mut self, _ts: u64, event_id: u16, rec: &[u8]) -> Result<(), ParseError> {
            if u32::from(event_id) == self.id {
                self.at.push(rec.as_ptr() as usize - self.base);
            }
            Ok(())
        }
    }
    let mut sink = Sink {
        base: pages.as_ptr() as usize,
        id,
        at: Vec::new(),
    };
    for page in pages.chunks(layout.page_size) {
        let _ = parse_page(page, layout, &mut sink);
    }
    sink.at
}

/// A switch away from a task no recorded switch went to means the kernel
/// skipped an event (this VM's kernel never records the switch out of one
/// cpu's idle task): it is counted and written in full, prev_pid and all,
/// so trace_processor sees the mismatch that compact sched would hide.
#[test]
fn a_switch_the_kernel_never_recorded_is_counted_and_written_in_full() {
    let table = fixture_table(true);
    let filter = all_ids(&table);
    let compact = fixture_compact();
    for compact_on in [true, false] {
        let ctx = BundleContext {
            compact_sched: compact_on.then_some(compact),
            sched_switch: Some(compact.switch),
            ..plain_ctx(&table, &filter)
        };
        let mut pages = CPU0.to_vec();
        let at = record_offsets(&pages, &layout(), compact.switch.event_id);
        assert_eq!(at.len(), 55);
        let off = at[10] + compact.switch.prev_pid;
        pages[off..off + 4].copy_from_slice(&999_999i32.to_le_bytes());
        let mut state = CpuState::default();
        let mut out = Packets::default();
        write_pages(&mut out, 0, &pages, &layout(), &ctx, &mut state);
        assert_eq!(state.unrecorded_switches, 1);
        let b = bundles(&out);
        let full: Vec<_> = b
            .iter()
            .flat_map(|b| &b.event)
            .filter_map(|e| match &e.event {
                OneOfevent::sched_switch(s) => Some(s.prev_pid.unwrap()),
                _ => None,
            })
            .collect();
        let compact_n: usize = b
            .iter()
            .filter_map(|b| b.compact_sched.as_ref())
            .map(|c| c.switch_timestamp.len())
            .sum();
        if compact_on {
            assert_eq!((full, compact_n), (vec![999_999], 54));
        } else {
            assert_eq!((full.len(), full[10]), (55, 999_999));
        }
    }
    // The count travels in the end-of-trace stats packet, per cpu, as the
    // declared `tracebox_ftrace_stats` extension beside `ftrace_stats` (a
    // field of ours inside FtraceCpuStats would be unknown upstream).
    let mut s = VecStream::new();
    let cpus = [CpuStats::default(), CpuStats::default()];
    let unrecorded = [0, 3];
    let snap = StatsSnapshot {
        cpu_stats: &cpus,
        unrecorded_switches: &unrecorded,
        ..Default::default()
    };
    write_ftrace_stats(&mut s, Phase::EndOfTrace, &snap);
    trace_extensions::write_unrecorded_switches(&mut s, &unrecorded);
    let bytes = s.into_bytes();
    let p = TracePacket::from_reader(&mut BytesReader::from_bytes(&bytes), &bytes).unwrap();
    let OneOfdata::ftrace_stats(st) = p.data else {
        panic!("no ftrace_stats")
    };
    let inside: Vec<_> = st
        .cpu_stats
        .iter()
        .map(|c| c.tracebox_unrecorded_switches)
        .collect();
    assert_eq!(
        inside,
        vec![None, None],
        "nothing of ours inside upstream's message"
    );
    let mut per_cpu = Vec::new();
    for f in FieldIter::new(&bytes).filter(|f| f.number == trace_extensions::TRACEBOX_FTRACE_STATS)
    {
        for c in FieldIter::new(f.value).filter(|c| c.number == trace_extensions::ftrace::CPU_STATS)
        {
            let mut cpu_count = (None, None);
            for v in FieldIter::new(c.value) {
                let n = read_varint(v.value).unwrap().0;
                match v.number {
                    trace_extensions::ftrace::CPU => cpu_count.0 = Some(n),
                    trace_extensions::ftrace::UNRECORDED_SWITCHES => cpu_count.1 = Some(n),
                    _ => {}
                }
            }
            per_cpu.push(cpu_count);
        }
    }
    assert_eq!(per_cpu, vec![(Some(1), Some(3))]);
}

/// After events the kernel lost, the next switch starts afresh.
#[test]
fn lost_events_reset_the_switch_check() {
    let table = fixture_table(true);
    let filter = all_ids(&table);
    let compact = fixture_compact();
    let ctx = BundleContext {
        sched_switch: Some(compact.switch),
        ..plain_ctx(&table, &filter)
    };
    let layout = layout();
    let mut state = CpuState {
        last_switched_to: Some(424_242),
        ..Default::default()
    };
    let mut out = Packets::default();
    let mut pages = CPU0.to_vec();
    // RB_MISSED_EVENTS in the first page's commit word.
    let commit = layout.commit_offset as usize;
    pages[commit + 3] |= 0x80;
    write_pages(&mut out, 0, &pages, &layout, &ctx, &mut state);
    assert_eq!(state.unrecorded_switches, 0);
    let mut out = Packets::default();
    let mut state = CpuState {
        last_switched_to: Some(424_242),
        ..Default::default()
    };
    write_pages(&mut out, 0, CPU0, &layout, &ctx, &mut state);
    assert_eq!(state.unrecorded_switches, 1, "a stale pid without the loss");
}

#[test]
fn compact_sched_refuses_odd_formats() {
    let sw = parse_format(SWITCH).unwrap();
    let wk = parse_format(WAKING).unwrap();
    let mut odd = sw.clone();
    odd.fields.retain(|f| f.name != "next_prio");
    assert!(compact_sched::validate(&odd, &wk).is_none());
    let mut odd = wk.clone();
    for f in &mut odd.fields {
        if f.name == "comm" {
            f.size = 20;
        }
    }
    assert!(compact_sched::validate(&sw, &odd).is_none());
}

#[test]
fn filter_and_print_fallback() {
    // Without a readable print format, the built-in layout (id 5, buf at
    // 16) still decodes this kernel's markers.
    let table = fixture_table(false);
    let mut filter = EventFilter::default();
    filter.enable(table.event_by_name("ftrace", "print").unwrap().ftrace_id);
    let ctx = plain_ctx(&table, &filter);
    let mut out = Packets::default();
    let sum = write_pages(&mut out, 0, CPU0, &layout(), &ctx, &mut CpuState::default());
    assert_eq!(sum.events, 60);
    let got: Vec<_> = bundles(&out)[0]
        .event
        .iter()
        .map(|e| match &e.event {
            OneOfevent::print(p) => p.buf.clone().unwrap(),
            _ => panic!(),
        })
        .collect();
    assert_eq!(got, expected_markers());
}

#[test]
fn lost_events_and_errors() {
    let table = fixture_table(true);
    let filter = all_ids(&table);
    let ctx = plain_ctx(&table, &filter);
    let mut pages = CPU0.to_vec();
    // Page 2 says events were lost before it.
    pages[4096 + 11] |= 0x80;
    let mut state = CpuState::default();
    let mut out = Packets::default();
    let sum = write_pages(&mut out, 0, &pages, &layout(), &ctx, &mut state);
    assert_eq!(sum.bundles, 2);
    let bs = bundles(&out);
    assert_eq!(bs[0].lost_events, None);
    assert_eq!(bs[1].lost_events, Some(true));
    assert_eq!(
        bs[1].previous_bundle_end_timestamp,
        Some(bs[0].event.last().unwrap().timestamp.unwrap())
    );
    assert_eq!(bs[0].event.len() + bs[1].event.len(), 115);

    // Corrupt the first event header of page 1: type_len 0 with length 0.
    let mut bad = CPU0.to_vec();
    bad[16..20].copy_from_slice(&0u32.to_le_bytes());
    bad[20..24].copy_from_slice(&0u32.to_le_bytes());
    let mut state = CpuState::default();
    let mut out = Packets::default();
    let sum = write_pages(&mut out, 0, &bad, &layout(), &ctx, &mut state);
    assert_eq!(sum.errors, 1);
    assert_eq!(state.parse_errors, [ParseError::ZeroDataLength]);
    let b = &bundles(&out)[0];
    assert_eq!(b.error.len(), 1);
    assert_eq!(b.error[0].status.map(|s| s as u32), Some(12));
    let page0 = u64::from_le_bytes(CPU0[..8].try_into().unwrap());
    assert_eq!(b.error[0].timestamp, Some(page0));
    // Page 2 is intact.
    assert!(!b.event.is_empty());

    // A garbage page header: error, no panic, later pages still parsed.
    let mut bad = CPU0.to_vec();
    bad[8..12].copy_from_slice(&0x7ff_ffffu32.to_le_bytes());
    let mut out = Packets::default();
    let sum = write_pages(&mut out, 0, &bad, &layout(), &ctx, &mut CpuState::default());
    assert_eq!(sum.errors, 1);
    assert_eq!(bundles(&out)[0].error[0].status.map(|s| s as u32), Some(4));
}

#[test]
fn generic_events() {
    let mut table = fixture_table(true);
    let fmt = "name: my_event\nID: 900\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
        \tfield:int delta;\toffset:8;\tsize:4;\tsigned:1;\n\
        \tfield:u64 count;\toffset:16;\tsize:8;\tsigned:0;\n\
        \tfield:__data_loc char[] label;\toffset:24;\tsize:4;\tsigned:0;\n\
        \tfield:char tag[8];\toffset:28;\tsize:8;\tsigned:0;\n";
    let id = table.add_generic("mygroup", "my_event", fmt).unwrap();
    assert_eq!(id, 900);
    let mut filter = EventFilter::default();
    filter.enable(900);
    // One page with one 48-byte record.
    let mut rec = vec![0u8; 48];
    rec[..2].copy_from_slice(&900u16.to_le_bytes());
    rec[4..8].copy_from_slice(&77i32.to_le_bytes());
    rec[8..12].copy_from_slice(&(-3i32).to_le_bytes());
    rec[16..24].copy_from_slice(&12345u64.to_le_bytes());
    rec[24..28].copy_from_slice(&(36u32 | (6 << 16)).to_le_bytes());
    rec[28..31].copy_from_slice(b"abc");
    rec[36..42].copy_from_slice(b"hello\0");
    let mut page = vec![0u8; 4096];
    page[..8].copy_from_slice(&1000u64.to_le_bytes());
    page[8..16].copy_from_slice(&(4 + 48u64).to_le_bytes());
    page[16..20].copy_from_slice(&(12u32 | (5 << 5)).to_le_bytes());
    page[20..68].copy_from_slice(&rec);
    let ctx = plain_ctx(&table, &filter);
    let mut out = Packets::default();
    let mut state = CpuState::default();
    write_pages(
        &mut out,
        1,
        &page,
        &PageHeaderLayout::DEFAULT_64,
        &ctx,
        &mut state,
    );
    let b = &bundles(&out)[0];
    assert_eq!(b.cpu, Some(1));
    let e = &b.event[0];
    assert_eq!((e.timestamp, e.pid), (Some(1005), Some(77)));
    let OneOfevent::generic(g) = &e.event else {
        panic!("{e:?}")
    };
    assert_eq!(g.event_name.as_deref(), Some("my_event"));
    let fields: Vec<_> = g
        .field
        .iter()
        .map(|f| (f.name.clone().unwrap(), f.value.clone()))
        .collect();
    assert_eq!(
        fields,
        [
            ("delta".to_string(), OneOfvalue::int_value(-3)),
            ("count".to_string(), OneOfvalue::uint_value(12345)),
            ("label".to_string(), OneOfvalue::str_value("hello".into())),
            ("tag".to_string(), OneOfvalue::str_value("abc".into())),
        ]
    );
    // common_pid is handed to the process scraper.
    assert_eq!(state.metadata.pids, [77]);
}

/// Deterministic mutation run over the real pages (the cargo-fuzz target
/// does this at scale): no panic, and every packet is well-formed.
#[test]
fn mutated_pages_never_panic() {
    let table = fixture_table(true);
    let filter = all_ids(&table);
    let compact = compact_sched::validate(
        &parse_format(SWITCH).unwrap(),
        &parse_format(WAKING).unwrap(),
    );
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut errors = 0;
    for round in 0..3000 {
        let mut pages = CPU0.to_vec();
        for _ in 0..(1 + next() % 8) {
            let at = (next() % pages.len() as u64) as usize;
            pages[at] = next() as u8;
        }
        let ctx = BundleContext {
            table: &table,
            filter: &filter,
            ksyms: None,
            compact_sched: if round % 2 == 0 { compact } else { None },
            sched_switch: compact.map(|c| c.switch),
            clock: None,
        };
        let mut out = Packets::default();
        let sum = write_pages(
            &mut out,
            0,
            &pages,
            &layout(),
            &ctx,
            &mut CpuState::default(),
        );
        errors += sum.errors;
        // Like traced_probes, comm/strings are copied raw from the kernel,
        // so mutated bytes may not be UTF-8; anything else must decode.
        for b in &out.done {
            match TracePacket::from_reader(&mut BytesReader::from_bytes(b), b) {
                Ok(_) | Err(quick_protobuf::Error::Utf8(_)) => {}
                Err(e) => panic!("round {round}: {e:?}"),
            }
        }
    }
    // Random bytes in event headers do break pages now and then.
    assert!(errors > 0);
}

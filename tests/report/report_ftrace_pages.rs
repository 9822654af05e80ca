//! The report's bundle reader on bundles our traced_probes wrote from
//! captured kernel pages: compact_sched and full events decode to the same
//! switches (timestamps, pids, states, comms), and the atrace markers in
//! the pages come out as print events in order.

use crate::support::ftrace as ftrace_common;

use std::collections::HashMap;

use ftrace_common::Packets;
use tracebox::protozero::decode::FieldIter;
use tracebox::report::ftrace::{decode_bundle, BundleStats, Ev, Rec};
use tracebox::traced_probes::ftrace::parse::bundle::{
    write_pages, BundleContext, CpuState, EventFilter,
};
use tracebox::traced_probes::ftrace::parse::compact_sched;
use tracebox::traced_probes::ftrace::parse::format::{parse_format, parse_header_page};
use tracebox::traced_probes::ftrace::parse::translate::TranslationTable;

const CPU0: &[u8] = include_bytes!("../data/ftrace-pages/cpu0.pages");
const MARKERS: &str = include_str!("../data/ftrace-pages/markers.txt");
const PRINT: &str = include_str!("../data/ftrace-pages/print.format");
const SWITCH: &str = include_str!("../data/ftrace-pages/sched_switch.format");
const WAKING: &str = include_str!("../data/ftrace-pages/sched_waking.format");
const HEADER_PAGE: &str = include_str!("../data/ftrace-pages/header_page");

/// Records and comms of the pages, written with or without compact sched.
fn read_back(compact: bool) -> (Vec<Rec>, HashMap<i32, String>) {
    let table = TranslationTable::build(&|g, n| match (g, n) {
        ("ftrace", "print") => Some(PRINT.to_string()),
        ("sched", "sched_switch") => Some(SWITCH.to_string()),
        ("sched", "sched_waking") => Some(WAKING.to_string()),
        _ => None,
    });
    let mut filter = EventFilter::default();
    for e in table.events() {
        filter.enable(e.ftrace_id);
    }
    let cs = compact_sched::validate(
        &parse_format(SWITCH).unwrap(),
        &parse_format(WAKING).unwrap(),
    );
    let ctx = BundleContext {
        table: &table,
        filter: &filter,
        compact_sched: if compact { cs } else { None },
        sched_switch: cs.map(|c| c.switch),
        clock: None,
        ksyms: None,
    };
    let mut out = Packets::default();
    let layout = parse_header_page(HEADER_PAGE).unwrap();
    write_pages(&mut out, 0, CPU0, &layout, &ctx, &mut CpuState::default());
    let (mut recs, mut comms) = (Vec::new(), HashMap::new());
    let mut st = BundleStats::default();
    for p in &out.done {
        let b = FieldIter::new(p).find(|f| f.number == 1).unwrap().value;
        decode_bundle(
            b,
            false,
            &mut st,
            &mut |_, tid, name, _| {
                comms.insert(tid, String::from_utf8_lossy(name).into_owned());
            },
            &mut |r| recs.push(r),
        );
    }
    assert_eq!((st.malformed, st.errors), (0, 0));
    (recs, comms)
}

#[test]
fn compact_and_full_bundles_read_the_same() {
    let (full, full_comms) = read_back(false);
    let (compact, compact_comms) = read_back(true);
    let switches = |recs: &[Rec]| -> Vec<(u64, i32, i64, i32)> {
        recs.iter()
            .filter_map(|r| match r.ev {
                Ev::Switch {
                    next_pid,
                    prev_state,
                    next_prio,
                    ..
                } => Some((r.ts, next_pid, prev_state, next_prio)),
                _ => None,
            })
            .collect()
    };
    assert_eq!(switches(&full).len(), 55);
    assert_eq!(switches(&full), switches(&compact));
    for (tid, name) in &compact_comms {
        assert_eq!(full_comms.get(tid), Some(name), "comm of {tid}");
    }
    // Full switches name their prev task; compact ones leave it to the
    // reader (-1).
    assert!(full
        .iter()
        .all(|r| !matches!(r.ev, Ev::Switch { prev_pid: -1, .. })));
    assert!(compact
        .iter()
        .all(|r| matches!(r.ev, Ev::Switch { prev_pid: -1, .. } | Ev::Print(_))));

    let prints: Vec<String> = full
        .iter()
        .filter_map(|r| match &r.ev {
            Ev::Print(s) => Some(s.trim_end().to_owned()),
            _ => None,
        })
        .collect();
    let want: Vec<String> = MARKERS.lines().map(str::to_owned).collect();
    assert_eq!(prints, want);
}

//! `tracebox report`: reads a Perfetto trace (ours or upstream's) on the
//! board and answers the first questions: what ran where, what was lost,
//! how long wakeups waited, what the atrace markers measured; or dumps the
//! events in time order like `trace-cmd report`.
//!
//! One streaming pass: packets come from [`reader`] one at a time, ftrace
//! bundles become records ([`ftrace`]), a bounded heap puts every cpu's
//! records in time order ([`sorter`]) and [`analysis`] or [`events`]
//! consume them. Memory is bounded by the heap, the largest packet and
//! the number of threads and distinct names, never by the trace's length.

pub mod analysis;
pub mod events;
pub mod ftrace;
pub mod meta;
pub mod output;
pub mod reader;
pub mod sorter;

use std::io::Read;

use analysis::Analysis;
use ftrace::{BundleStats, Rec};
use meta::Meta;
use reader::PacketReader;
use sorter::Sorter;

/// Everything one pass learned besides what the sink took.
#[derive(Default)]
pub struct Walk {
    pub meta: Meta,
    pub bundles: BundleStats,
    pub late: u64,
    pub bytes: u64,
    /// Top-level fields that were not packets.
    pub stray_fields: u64,
    /// Why the file could not be read to its end.
    pub error: Option<String>,
}

impl Walk {
    /// Thread name: process tree first, then the sched comm.
    pub fn name(&self, tid: i32) -> String {
        self.meta.name(tid)
    }
}

/// Reads the whole trace, handing every ftrace event to `sink` in time
/// order. `keep_raw` keeps event payloads (for printing their fields).
pub fn walk<R: Read>(src: R, keep_raw: bool, sink: &mut dyn FnMut(&Rec, &Walk)) -> Walk {
    let mut w = Walk::default();
    let mut rd = PacketReader::new(src);
    let mut sorter = Sorter::default();
    let mut recs = Vec::new();
    while let Some(p) = rd.next_packet() {
        let Some(b) = w.meta.packet(p) else { continue };
        let meta = &mut w.meta;
        let mut comm = |tid: i32, name: &[u8]| {
            if tid <= 0 || name.is_empty() {
                return;
            }
            if let Some(t) = meta.task(tid) {
                if t.comm.as_bytes() != name {
                    t.comm = String::from_utf8_lossy(name).into_owned();
                }
            }
        };
        ftrace::decode_bundle(b, keep_raw, &mut w.bundles, &mut comm, &mut |r| {
            recs.push(r)
        });
        for r in recs.drain(..) {
            sorter.push(r, &mut |r| sink(&r, &w));
        }
    }
    sorter.finish(&mut |r| sink(&r, &w));
    w.late = sorter.late;
    w.bytes = rd.offset;
    w.stray_fields = rd.unknown_fields;
    w.error = rd.error.take();
    w
}

/// The summary of a trace, events between `since` and `until` (trace
/// timestamps, ns).
pub fn summarize<R: Read>(src: R, since: u64, until: u64) -> (Walk, Analysis) {
    let mut a = Analysis::new(since, until);
    let w = walk(src, false, &mut |r, _| a.feed(r));
    a.finish();
    (w, a)
}

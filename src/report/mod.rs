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
pub mod clock;
pub mod events;
pub mod ftrace;
pub mod meta;
pub mod output;
pub mod profile;
pub mod reader;
pub mod seq;
pub mod sorter;

use std::io::Read;

use crate::codec;
use crate::protozero::decode::FieldIter;

use analysis::Analysis;
use ftrace::{BundleStats, Ev, Rec};
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

/// What one `compressed_packets` or `zstd_compressed_packets` may
/// decompress to (the service makes them
/// from read passes of about 1 MiB).
const MAX_INFLATED: usize = 64 << 20;

/// Reads the whole trace, handing every ftrace event to `sink` in time
/// order. `keep_raw` keeps event payloads (for printing their fields).
/// Packets compressed by the service (deflate or zstd) are decompressed
/// and read like the rest.
pub fn walk<R: Read>(src: R, keep_raw: bool, sink: &mut dyn FnMut(&Rec, &Walk)) -> Walk {
    let mut w = Walk::default();
    let mut rd = PacketReader::new(src);
    let mut sorter = Sorter::default();
    while let Some(p) = rd.next_packet() {
        let z =
            FieldIter::new(p).find(|f| codec::is_compressed_packets(f.number) && f.wire_type == 2);
        let Some(z) = z else {
            take_packet(p, keep_raw, &mut w, &mut sorter, sink);
            continue;
        };
        w.meta.compressed += 1;
        match codec::decompress_packets(z.number, z.value, MAX_INFLATED) {
            Some(raw) => {
                let mut inner = FieldIter::new(&raw);
                for f in (&mut inner).filter(|f| f.number == 1 && f.wire_type == 2) {
                    take_packet(f.value, keep_raw, &mut w, &mut sorter, sink);
                }
                w.meta.malformed_packets += inner.error as u64;
            }
            None => w.meta.malformed_packets += 1,
        }
    }
    sorter.finish(&mut |r| sink(&r, &w));
    w.late = sorter.late;
    w.bytes = rd.offset;
    w.stray_fields = rd.unknown_fields;
    w.error = rd.error.take();
    w
}

/// One (uncompressed) packet: its metadata, and its events (ftrace, SDK,
/// name changes) on the trace clock into the time-ordering window.
fn take_packet(
    p: &[u8],
    keep_raw: bool,
    w: &mut Walk,
    sorter: &mut Sorter,
    sink: &mut dyn FnMut(&Rec, &Walk),
) {
    let mut recs = Vec::new();
    let (bundle, seq) = w.meta.packet(p, &mut recs);
    if let Some(b) = bundle {
        // Name changes first: at equal times they apply to the event.
        // They are on the trace clock already (the names' times are
        // compared with the process tree's).
        let (meta, mut changes, mut events) = (&mut w.meta, Vec::new(), Vec::new());
        let (clock, snap) = ftrace::bundle_clock(b);
        let key = meta.clocks.ftrace(seq, clock, snap);
        let mut comm = |ts, tid, name: &[u8], renamed| {
            if let Some(ts) = meta.clocks.convert(key, ts) {
                meta.comm(ts, tid, name, renamed, &mut changes)
            }
        };
        ftrace::decode_bundle(b, keep_raw, &mut w.bundles, &mut comm, &mut |r| {
            events.push(r)
        });
        for r in &events {
            if let Ev::Other {
                id: ftrace::TASK_NEWTASK,
                raw,
            } = &r.ev
            {
                meta.new_task(r.pid, raw);
            }
        }
        recs.append(&mut changes);
        for mut r in events {
            if let Some(ts) = meta.clocks.convert(key, r.ts) {
                r.ts = ts;
                recs.push(r);
            }
        }
    }
    for r in recs {
        sorter.push(r, &mut |r| sink(&r, w));
    }
}

/// The summary of a trace, events between `since` and `until` (trace
/// timestamps, ns).
pub fn summarize<R: Read>(src: R, since: u64, until: u64) -> (Walk, Analysis) {
    let mut a = Analysis::new(since, until);
    let w = walk(src, false, &mut |r, _| a.feed(r));
    a.finish();
    (w, a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protozero::{put_bytes, VecStream};

    /// A trace and the same trace with all its packets in one
    /// `compressed_packets` (deflate) or `zstd_compressed_packets` (as
    /// traced writes them) give the same events in the same order.
    #[test]
    fn compressed_packets_are_read_like_the_rest() {
        let plain = include_bytes!("../../fuzz/corpus/report/compact_sched");
        let events = |bytes: &[u8]| {
            let mut out = Vec::new();
            let w = walk(bytes, false, &mut |r, _| out.push((r.ts, r.cpu)));
            (out, w.meta.compressed, w.meta.malformed_packets)
        };
        let (a, none, _) = events(plain);
        assert!(a.len() > 100, "{}", a.len());
        assert_eq!(none, 0);
        let deflate = miniz_oxide::deflate::compress_to_vec_zlib(plain, 6);
        let zstd = codec::zstd::compress(plain, 3);
        for (field, z) in [
            (codec::COMPRESSED_PACKETS, deflate),
            (codec::ZSTD_COMPRESSED_PACKETS, zstd),
        ] {
            let mut packet = VecStream::new();
            put_bytes(&mut packet, field, &z);
            let mut trace = VecStream::new();
            put_bytes(&mut trace, 1, &packet.into_bytes());
            assert_eq!(
                events(&trace.into_bytes()),
                (a.clone(), 1, 0),
                "field {field}"
            );
        }
    }

    /// A zstd bomb (past MAX_INFLATED) is refused and counted, not read.
    #[test]
    fn a_zstd_bomb_is_counted_malformed() {
        let z = codec::zstd::compress(&vec![0u8; MAX_INFLATED + 1], 1);
        let mut packet = VecStream::new();
        put_bytes(&mut packet, codec::ZSTD_COMPRESSED_PACKETS, &z);
        let mut trace = VecStream::new();
        put_bytes(&mut trace, 1, &packet.into_bytes());
        let w = walk(&trace.into_bytes()[..], false, &mut |_, _| {});
        assert_eq!((w.meta.compressed, w.meta.malformed_packets), (1, 1));
    }
}

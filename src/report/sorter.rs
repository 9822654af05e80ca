//! Puts events of all cpus in time order. Bundles hold one cpu each, in
//! time order, but the file interleaves cpus read pass by read pass; a
//! bounded min-heap merges them. An event older than one already released
//! (the heap was full) is still used, and counted as late.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::ftrace::{Ev, Rec};

/// Events held back at most (one read pass of a busy many-core board).
pub const WINDOW: usize = 1 << 18;
/// Bytes held back at most (events and their payloads): large events
/// (4 KB prints) fill this before `WINDOW`, which alone would let a trace
/// of them hold a gigabyte.
pub const WINDOW_BYTES: usize = 32 << 20;

/// What an event holds in the window: itself and its payload.
fn weight(r: &Rec) -> usize {
    let payload = match &r.ev {
        Ev::Print(s) | Ev::Track(_, s) | Ev::Comm(s) => s.len(),
        Ev::Other { raw, .. } => raw.len(),
        Ev::Switch { .. } | Ev::Waking { .. } => 0,
    };
    std::mem::size_of::<Item>() + payload
}

struct Item(u64, u64, Rec);

impl PartialEq for Item {
    fn eq(&self, o: &Self) -> bool {
        (self.0, self.1) == (o.0, o.1)
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Item {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.0, self.1).cmp(&(o.0, o.1))
    }
}

#[derive(Default)]
pub struct Sorter {
    heap: BinaryHeap<Reverse<Item>>,
    seq: u64,
    released: u64,
    bytes: usize,
    pub late: u64,
}

impl Sorter {
    pub fn push(&mut self, r: Rec, out: &mut dyn FnMut(Rec)) {
        self.seq += 1;
        self.bytes += weight(&r);
        self.heap.push(Reverse(Item(r.ts, self.seq, r)));
        while self.heap.len() > WINDOW || (self.bytes > WINDOW_BYTES && self.heap.len() > 1) {
            self.pop(out);
        }
    }

    fn pop(&mut self, out: &mut dyn FnMut(Rec)) {
        if let Some(Reverse(Item(ts, _, r))) = self.heap.pop() {
            self.bytes -= weight(&r);
            if ts < self.released {
                self.late += 1;
            }
            self.released = self.released.max(ts);
            out(r);
        }
    }

    pub fn finish(&mut self, out: &mut dyn FnMut(Rec)) {
        while !self.heap.is_empty() {
            self.pop(out);
        }
    }
}

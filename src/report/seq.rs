//! Per-sequence state of SDK producers: packet defaults (clock, track),
//! interned event names, and which thread each track belongs to; and their
//! TrackEvents as records. Reset with the sequence's incremental state.

use std::collections::HashMap;

use super::ftrace::{Ev, Rec, NO_CPU};
use crate::protozero::decode::{read_varint, FieldIter};

/// Entries kept (names, defaults, tracks); more are counted.
const MAX_ENTRIES: usize = 1 << 20;
/// Keys of `vals`: (seq, DEFAULT_CLOCK), (seq, DEFAULT_TRACK), (TRACKS, uuid).
const DEFAULT_CLOCK: u64 = u64::MAX;
const DEFAULT_TRACK: u64 = u64::MAX - 1;
const TRACKS: u32 = u32::MAX;

#[derive(Debug, Default)]
pub struct Seqs {
    names: HashMap<(u32, u64), Box<str>>,
    vals: HashMap<(u32, u64), u64>,
    pub over_limit: u64,
}

fn varint(v: &[u8]) -> u64 {
    read_varint(v).map_or(0, |x| x.0)
}

impl Seqs {
    fn room(&mut self) -> bool {
        let ok = self.names.len() + self.vals.len() < MAX_ENTRIES;
        self.over_limit += !ok as u64;
        ok
    }

    fn set(&mut self, k: (u32, u64), v: u64) {
        if self.vals.contains_key(&k) || self.room() {
            self.vals.insert(k, v);
        }
    }

    /// `SEQ_INCREMENTAL_STATE_CLEARED`: the sequence starts over.
    pub fn clear(&mut self, seq: u32) {
        self.names.retain(|k, _| k.0 != seq);
        self.vals.retain(|k, _| k.0 != seq);
    }

    /// The sequence's default `timestamp_clock_id` (0: none).
    pub fn clock(&self, seq: u32) -> u64 {
        self.vals.get(&(seq, DEFAULT_CLOCK)).copied().unwrap_or(0)
    }

    /// `TracePacketDefaults`.
    pub fn defaults(&mut self, seq: u32, b: &[u8]) {
        for f in FieldIter::new(b) {
            match f.number {
                58 => self.set((seq, DEFAULT_CLOCK), varint(f.value)),
                11 => {
                    let t = FieldIter::new(f.value).find(|g| g.number == 11);
                    if let Some(t) = t {
                        self.set((seq, DEFAULT_TRACK), varint(t.value));
                    }
                }
                _ => {}
            }
        }
    }

    /// `InternedData.event_names`.
    pub fn intern(&mut self, seq: u32, b: &[u8]) {
        for f in FieldIter::new(b).filter(|f| f.number == 2) {
            let (mut iid, mut name) = (0, &[][..]);
            for g in FieldIter::new(f.value) {
                match g.number {
                    1 => iid = varint(g.value),
                    2 => name = g.value,
                    _ => {}
                }
            }
            if self.names.contains_key(&(seq, iid)) || self.room() {
                let n = String::from_utf8_lossy(name).into();
                self.names.insert((seq, iid), n);
            }
        }
    }

    /// `TrackDescriptor`: the thread (or process) of a track.
    pub fn descriptor(&mut self, b: &[u8]) {
        let (mut uuid, mut tid) = (0, None);
        for f in FieldIter::new(b) {
            match f.number {
                1 => uuid = varint(f.value),
                3 | 4 => {
                    let want = if f.number == 4 { 2 } else { 1 };
                    tid = FieldIter::new(f.value)
                        .find(|g| g.number == want)
                        .map(|g| varint(g.value));
                }
                _ => {}
            }
        }
        if let Some(tid) = tid {
            self.set((TRACKS, uuid), tid);
        }
    }

    /// A `TrackEvent` at `ts` (trace clock) as a record of its track's
    /// thread (-1 when unknown).
    pub fn track_event(&self, seq: u32, ts: u64, b: &[u8]) -> Rec {
        let (mut kind, mut iid, mut name, mut uuid) = (0, 0, None, None);
        for f in FieldIter::new(b) {
            match f.number {
                9 => kind = varint(f.value) as u8,
                10 => iid = varint(f.value),
                23 => name = Some(String::from_utf8_lossy(f.value).into()),
                11 => uuid = Some(varint(f.value)),
                _ => {}
            }
        }
        let uuid = uuid.or_else(|| self.vals.get(&(seq, DEFAULT_TRACK)).copied());
        let tid = uuid.and_then(|u| self.vals.get(&(TRACKS, u)));
        let name = name.or_else(|| self.names.get(&(seq, iid)).cloned());
        Rec {
            ts,
            cpu: NO_CPU,
            pid: tid.map_or(-1, |t| *t as i32),
            ev: Ev::Track(kind, name.unwrap_or_default()),
        }
    }
}

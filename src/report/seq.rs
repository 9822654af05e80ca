//! Per-sequence state of SDK producers: packet defaults (clock, track),
//! interned event names, and which thread each track belongs to; and their
//! TrackEvents as records. Reset with the sequence's incremental state.
//! (Vecs and a `HashMap<u64, String>` the binary already has: every new
//! map type costs binary size.)

use std::collections::HashMap;

use super::ftrace::{Ev, Rec, NO_CPU};
use crate::protozero::decode::{read_varint, FieldIter};

/// Entries kept per table; more are counted. Sequences are searched
/// linearly per packet and tracks kept sorted by insertion: both stay small.
const MAX_ENTRIES: usize = 1 << 20;
const MAX_SEQS: usize = 1 << 12;
const MAX_TRACKS: usize = 1 << 16;

#[derive(Debug, Default)]
pub struct Seqs {
    /// Event names by `seq << 32 | iid` (iids past 32 bits are counted).
    names: HashMap<u64, String>,
    /// (sequence, default timestamp_clock_id, default track uuid).
    defaults: Vec<(u32, u64, u64)>,
    /// (track uuid, its thread or process), sorted.
    tracks: Vec<(u64, i32)>,
    pub over_limit: u64,
}

fn varint(v: &[u8]) -> u64 {
    read_varint(v).map_or(0, |x| x.0)
}

impl Seqs {
    /// `SEQ_INCREMENTAL_STATE_CLEARED`: the sequence starts over.
    pub fn clear(&mut self, seq: u32) {
        self.names.retain(|k, _| (k >> 32) as u32 != seq);
        self.defaults.retain(|d| d.0 != seq);
    }

    fn defaults_of(&self, seq: u32) -> (u64, u64) {
        let d = self.defaults.iter().find(|d| d.0 == seq);
        d.map_or((0, 0), |d| (d.1, d.2))
    }

    /// The sequence's default `timestamp_clock_id` (0: none).
    pub fn clock(&self, seq: u32) -> u64 {
        self.defaults_of(seq).0
    }

    /// `TracePacketDefaults`.
    pub fn defaults(&mut self, seq: u32, b: &[u8]) {
        let (mut clock, mut track) = (0, 0);
        for f in FieldIter::new(b) {
            match f.number {
                58 => clock = varint(f.value),
                11 => {
                    let t = FieldIter::new(f.value).find(|g| g.number == 11);
                    track = t.map_or(0, |t| varint(t.value));
                }
                _ => {}
            }
        }
        self.defaults.retain(|d| d.0 != seq);
        if self.defaults.len() < MAX_SEQS {
            self.defaults.push((seq, clock, track));
        } else {
            self.over_limit += 1;
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
            let k = (seq as u64) << 32 | iid;
            if iid >> 32 != 0 || (self.names.len() >= MAX_ENTRIES && !self.names.contains_key(&k)) {
                self.over_limit += 1;
                continue;
            }
            self.names
                .insert(k, String::from_utf8_lossy(name).into_owned());
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
                        .map(|g| varint(g.value) as i32);
                }
                _ => {}
            }
        }
        let Some(tid) = tid else { return };
        match self.tracks.binary_search_by_key(&uuid, |t| t.0) {
            Ok(i) => self.tracks[i].1 = tid,
            Err(i) if self.tracks.len() < MAX_TRACKS => self.tracks.insert(i, (uuid, tid)),
            Err(_) => self.over_limit += 1,
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
        let uuid = uuid.unwrap_or_else(|| self.defaults_of(seq).1);
        let tid = self.tracks.binary_search_by_key(&uuid, |t| t.0);
        let key = (iid >> 32 == 0).then_some((seq as u64) << 32 | iid);
        let named = || {
            key.and_then(|k| self.names.get(&k))
                .map(|n| n.as_str().into())
        };
        Rec {
            ts,
            cpu: NO_CPU,
            pid: tid.map_or(-1, |i| self.tracks[i].1),
            ev: Ev::Track(kind, name.or_else(named).unwrap_or_default()),
        }
    }
}

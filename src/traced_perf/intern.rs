//! Per-sequence interning of what PerfSample packets reference: callstacks,
//! frames, mappings and the strings behind them (function names, build
//! ids, mapping path components), written as InternedData in the packet
//! that first uses them, as upstream's readers expect.
//!
//! Memory is bounded: past [`BUDGET_BYTES`] the tables start over and the
//! next packet says SEQ_INCREMENTAL_STATE_CLEARED.

use std::collections::HashMap;
use std::rc::Rc;

use crate::protozero::{begin_nested, end_nested, put_bytes, put_varint, Stream, VecStream};

pub const BUDGET_BYTES: usize = 16 << 20;

// InternedData fields.
const FUNCTION_NAMES: u32 = 5;
const FRAMES: u32 = 6;
const CALLSTACKS: u32 = 7;
const BUILD_IDS: u32 = 16;
const MAPPING_PATHS: u32 = 17;
const MAPPINGS: u32 = 19;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MappingKey {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    pub load_bias: u64,
    pub path: Rc<str>,
}

struct Strings {
    field: u32,
    ids: HashMap<Box<[u8]>, u64>,
}

impl Strings {
    fn new(field: u32) -> Strings {
        Strings {
            field,
            ids: HashMap::new(),
        }
    }
}

pub struct Interner {
    names: Strings,
    build_ids: Strings,
    paths: Strings,
    mappings: HashMap<MappingKey, u64>,
    frames: HashMap<(u64, u64), u64>,
    /// Frames written without a name because their file's symbols were
    /// still loading: once they are in, the same (mapping, rel_pc) gets a
    /// frame of its own, with the name.
    unnamed_for_now: HashMap<(u64, u64), u64>,
    callstacks: HashMap<Box<[u64]>, u64>,
    next_iid: u64,
    bytes: usize,
    /// InternedData entries not yet written.
    pub pending: VecStream,
    pub resets: u64,
}

impl Default for Interner {
    fn default() -> Self {
        Interner {
            names: Strings::new(FUNCTION_NAMES),
            build_ids: Strings::new(BUILD_IDS),
            paths: Strings::new(MAPPING_PATHS),
            mappings: HashMap::new(),
            frames: HashMap::new(),
            unnamed_for_now: HashMap::new(),
            callstacks: HashMap::new(),
            next_iid: 1,
            bytes: 0,
            pending: VecStream::new(),
            resets: 0,
        }
    }
}

fn put_string(pending: &mut VecStream, field: u32, iid: u64, s: &[u8]) {
    let n = begin_nested(pending, field);
    put_varint(pending, 1, iid);
    put_bytes(pending, 2, s);
    end_nested(pending, n);
}

impl Interner {
    /// Drops every table (incremental state cleared).
    pub fn clear(&mut self) {
        let resets = self.resets;
        *self = Interner::default();
        self.resets = resets;
    }

    /// Over budget: the caller clears and says so in the next packet.
    pub fn over_budget(&self) -> bool {
        self.bytes > BUDGET_BYTES
    }

    fn iid(&mut self) -> u64 {
        let i = self.next_iid;
        self.next_iid += 1;
        i
    }

    fn string(&mut self, which: u32, s: &[u8]) -> u64 {
        let table = match which {
            FUNCTION_NAMES => &mut self.names,
            BUILD_IDS => &mut self.build_ids,
            _ => &mut self.paths,
        };
        if let Some(&i) = table.ids.get(s) {
            return i;
        }
        let i = self.next_iid;
        self.next_iid += 1;
        table.ids.insert(s.into(), i);
        self.bytes += s.len() + 48;
        put_string(&mut self.pending, table.field, i, s);
        i
    }

    pub fn function_name(&mut self, name: &str) -> u64 {
        self.string(FUNCTION_NAMES, name.as_bytes())
    }

    pub fn mapping(&mut self, key: &MappingKey, build_id: &[u8]) -> u64 {
        if let Some(&i) = self.mappings.get(key) {
            return i;
        }
        let bid = (!build_id.is_empty()).then(|| self.string(BUILD_IDS, build_id));
        let parts: Vec<u64> = key
            .path
            .split('/')
            .filter(|p| !p.is_empty())
            .map(|p| self.string(MAPPING_PATHS, p.as_bytes()))
            .collect();
        let i = self.iid();
        let s = &mut self.pending;
        let n = begin_nested(s, MAPPINGS);
        put_varint(s, 1, i);
        if let Some(b) = bid {
            put_varint(s, 2, b);
        }
        put_varint(s, 8, key.pgoff);
        put_varint(s, 4, key.start);
        put_varint(s, 5, key.end);
        put_varint(s, 6, key.load_bias);
        for p in parts {
            put_varint(s, 7, p);
        }
        end_nested(s, n);
        self.bytes += key.path.len() + 96;
        self.mappings.insert(key.clone(), i);
        i
    }

    /// A frame of `mapping` at `rel_pc`; `name` is asked for only when the
    /// frame is new.
    pub fn frame<'n>(
        &mut self,
        mapping: u64,
        rel_pc: u64,
        name: impl FnOnce() -> Option<&'n str>,
    ) -> u64 {
        if let Some(&i) = self.frames.get(&(mapping, rel_pc)) {
            return i;
        }
        let name_id = name().map(|n| self.function_name(n));
        let i = self.write_frame(mapping, rel_pc, name_id);
        self.frames.insert((mapping, rel_pc), i);
        i
    }

    /// A frame of `mapping` at `rel_pc` without a name, apart from the
    /// named one [`Interner::frame`] gives once the name is known.
    pub fn frame_unnamed_for_now(&mut self, mapping: u64, rel_pc: u64) -> u64 {
        if let Some(&i) = self.unnamed_for_now.get(&(mapping, rel_pc)) {
            return i;
        }
        let i = self.write_frame(mapping, rel_pc, None);
        self.unnamed_for_now.insert((mapping, rel_pc), i);
        i
    }

    fn write_frame(&mut self, mapping: u64, rel_pc: u64, name_id: Option<u64>) -> u64 {
        let i = self.iid();
        let s = &mut self.pending;
        let n = begin_nested(s, FRAMES);
        put_varint(s, 1, i);
        if let Some(f) = name_id {
            put_varint(s, 2, f);
        }
        put_varint(s, 3, mapping);
        put_varint(s, 4, rel_pc);
        end_nested(s, n);
        self.bytes += 64;
        i
    }

    /// A callstack of frame iids, outermost frame first.
    pub fn callstack(&mut self, frames: &[u64]) -> u64 {
        if let Some(&i) = self.callstacks.get(frames) {
            return i;
        }
        let i = self.iid();
        let s = &mut self.pending;
        let n = begin_nested(s, CALLSTACKS);
        put_varint(s, 1, i);
        // Not packed: Callstack.frame_ids is a plain repeated field.
        for &f in frames {
            put_varint(s, 2, f);
        }
        end_nested(s, n);
        self.bytes += frames.len() * 16 + 64;
        self.callstacks.insert(frames.into(), i);
        i
    }

    /// Moves pending entries into a packet as its InternedData.
    pub fn write_pending<S: Stream + ?Sized>(&mut self, packet: &mut S) {
        if !self.pending.as_bytes().is_empty() {
            put_bytes(packet, 12, self.pending.as_bytes());
            self.pending.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protozero::decode::FieldIter;

    #[test]
    fn entries_are_written_once_and_ids_are_distinct() {
        let mut i = Interner::default();
        let key = MappingKey {
            start: 0x1000,
            end: 0x2000,
            pgoff: 0,
            load_bias: 0,
            path: "/usr/bin/x".into(),
        };
        let m = i.mapping(&key, b"\x01\x02");
        let f1 = i.frame(m, 0x10, || Some("main"));
        let f2 = i.frame(m, 0x20, || Some("main"));
        let c = i.callstack(&[f1, f2]);
        assert_eq!(i.mapping(&key, b"\x01\x02"), m);
        assert_eq!(i.frame(m, 0x10, || panic!("cached")), f1);
        assert_eq!(i.callstack(&[f1, f2]), c);
        let mut out = VecStream::new();
        i.write_pending(&mut out);
        let bytes = out.into_bytes();
        let data = FieldIter::new(&bytes).next().unwrap();
        let counts = FieldIter::new(data.value).fold(HashMap::new(), |mut m, f| {
            *m.entry(f.number).or_insert(0) += 1;
            m
        });
        assert_eq!(counts[&FUNCTION_NAMES], 1, "main once");
        assert_eq!(counts[&MAPPING_PATHS], 3, "usr, bin, x");
        assert_eq!(counts[&BUILD_IDS], 1);
        assert_eq!(counts[&FRAMES], 2);
        assert_eq!(counts[&CALLSTACKS], 1);
        assert!(i.pending.as_bytes().is_empty());
    }

    #[test]
    fn a_frame_unnamed_for_now_gets_a_named_one_later() {
        let mut i = Interner::default();
        let m = i.mapping(
            &MappingKey {
                start: 0x1000,
                end: 0x2000,
                pgoff: 0,
                load_bias: 0,
                path: "/lib/big.so".into(),
            },
            b"",
        );
        let unnamed = i.frame_unnamed_for_now(m, 0x10);
        assert_eq!(i.frame_unnamed_for_now(m, 0x10), unnamed);
        let named = i.frame(m, 0x10, || Some("f"));
        assert_ne!(named, unnamed);
        assert_eq!(i.frame_unnamed_for_now(m, 0x10), unnamed);
        assert_eq!(i.frame(m, 0x10, || panic!("cached")), named);
    }
}

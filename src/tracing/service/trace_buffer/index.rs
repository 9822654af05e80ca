//! The lookaside index: one entry per chunk record held in the buffer,
//! ordered by `(producer_id, writer_id, chunk_id)` so that a sequence's
//! chunks are adjacent and patches find their chunk quickly.
//!
//! The ordered map holds only each chunk's slot in a table of
//! [`ChunkMeta`]s. A slot stays put until its chunk leaves the index, so
//! the reader keeps the slot of the chunk it is in and reads packet after
//! packet without searching the map (a search costs hundreds of
//! instructions in a full buffer).

use std::collections::BTreeMap;
use std::ops::{Index, RangeBounds};

/// Identity of the process that committed a chunk, as the service learned
/// it from the connection (never from the producer's own bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClientIdentity {
    pub uid: u32,
    /// `None` where the transport cannot tell the peer's pid.
    pub pid: Option<i32>,
    /// 0 is the host machine; other values are remote machines.
    pub machine_id: u32,
}

/// Index key, ordered by `(producer_id, writer_id, chunk_id)`. Ordering
/// ignores chunk-id wrapping; readers deal with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChunkKey {
    pub producer_id: u16,
    pub writer_id: u16,
    pub chunk_id: u32,
}

/// The field-by-field order, computed as one integer comparison (index
/// lookups are on the read path of every packet).
impl Ord for ChunkKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.packed().cmp(&other.packed())
    }
}

impl PartialOrd for ChunkKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl ChunkKey {
    fn packed(&self) -> u64 {
        (u64::from(self.producer_id) << 48)
            | (u64::from(self.writer_id) << 32)
            | u64::from(self.chunk_id)
    }

    pub fn new(producer_id: u16, writer_id: u16, chunk_id: u32) -> Self {
        ChunkKey {
            producer_id,
            writer_id,
            chunk_id,
        }
    }

    /// The `(producer_id, writer_id)` sequence this chunk belongs to.
    pub fn sequence(&self) -> SequenceKey {
        (self.producer_id, self.writer_id)
    }
}

/// `(producer_id, writer_id)`.
pub type SequenceKey = (u16, u16);

/// Per-chunk bookkeeping kept outside the record bytes.
#[derive(Debug, Clone)]
pub struct ChunkMeta {
    /// Offset of the record header in the buffer.
    pub record_off: u32,
    pub num_fragments: u16,
    pub num_fragments_read: u16,
    /// Offset of the next unread fragment, relative to the payload start.
    pub cur_fragment_offset: u16,
    /// Chunk flags (ABI bits), possibly with the needs-patching bit cleared.
    pub flags: u8,
    /// Copied in the Complete state; an incomplete chunk may still grow and
    /// a sequence is never read past it.
    pub complete: bool,
    /// Whether the last packet consumed from this chunk was dropped
    /// (`Some(true)`) or returned (`Some(false)`); `None` while nothing but
    /// empty packets was consumed. Carries `previous_packet_dropped` across
    /// read passes. Upstream keeps a plain bit that empty packets reset,
    /// which can hide a loss or the start of a sequence; empty packets are
    /// invisible here.
    pub last_read_packet_skipped: Option<bool>,
    pub client: ClientIdentity,
    /// Moved to the front by a rewind (not written there by its producer).
    pub moved: bool,
}

impl ChunkMeta {
    pub fn new(
        record_off: u32,
        num_fragments: u16,
        complete: bool,
        flags: u8,
        client: ClientIdentity,
    ) -> Self {
        ChunkMeta {
            record_off,
            num_fragments,
            num_fragments_read: 0,
            cur_fragment_offset: 0,
            flags,
            complete,
            last_read_packet_skipped: None,
            client,
            moved: false,
        }
    }

    pub fn has_unread_fragments(&self) -> bool {
        self.num_fragments_read < self.num_fragments
    }
}

/// Position of a chunk's [`ChunkMeta`] in the [`ChunkIndex`] table.
pub type Slot = u32;

/// The index proper: ordered keys, each naming a slot of `metas`.
#[derive(Debug, Clone, Default)]
pub struct ChunkIndex {
    slots: BTreeMap<ChunkKey, Slot>,
    /// Live and free entries; never longer than the most chunks indexed at
    /// once (which the buffer size bounds).
    metas: Vec<ChunkMeta>,
    free: Vec<Slot>,
    /// Bumped whenever a slot is taken or freed: a slot remembered at one
    /// generation names the same chunk while the generation is unchanged.
    generation: u64,
}

impl ChunkIndex {
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn contains_key(&self, key: &ChunkKey) -> bool {
        self.slots.contains_key(key)
    }

    pub fn slot(&self, key: &ChunkKey) -> Option<Slot> {
        self.slots.get(key).copied()
    }

    pub fn get(&self, key: &ChunkKey) -> Option<&ChunkMeta> {
        self.slot(key).map(|s| &self.metas[s as usize])
    }

    pub fn get_mut(&mut self, key: &ChunkKey) -> Option<&mut ChunkMeta> {
        let s = self.slot(key)?;
        Some(&mut self.metas[s as usize])
    }

    /// The meta in a slot taken at the current generation.
    pub fn at(&self, slot: Slot) -> &ChunkMeta {
        &self.metas[slot as usize]
    }

    pub fn at_mut(&mut self, slot: Slot) -> &mut ChunkMeta {
        &mut self.metas[slot as usize]
    }

    /// Adds or replaces the entry of `key`.
    pub fn insert(&mut self, key: ChunkKey, meta: ChunkMeta) {
        if let Some(&s) = self.slots.get(&key) {
            self.metas[s as usize] = meta;
            return;
        }
        let s = match self.free.pop() {
            Some(s) => {
                self.metas[s as usize] = meta;
                s
            }
            None => {
                self.metas.push(meta);
                (self.metas.len() - 1) as Slot
            }
        };
        self.slots.insert(key, s);
        self.generation += 1;
    }

    pub fn remove(&mut self, key: &ChunkKey) -> Option<ChunkMeta> {
        let s = self.slots.remove(key)?;
        self.free.push(s);
        self.generation += 1;
        Some(self.metas[s as usize].clone())
    }

    /// Entries with keys in `range`, in key order, with their slots.
    pub fn range_slots<R: RangeBounds<ChunkKey>>(
        &self,
        range: R,
    ) -> impl DoubleEndedIterator<Item = (ChunkKey, Slot, &ChunkMeta)> + '_ {
        self.slots
            .range(range)
            .map(|(k, &s)| (*k, s, &self.metas[s as usize]))
    }

    /// Entries with keys in `range`, in key order.
    pub fn range<R: RangeBounds<ChunkKey>>(
        &self,
        range: R,
    ) -> impl DoubleEndedIterator<Item = (&ChunkKey, &ChunkMeta)> + '_ {
        self.slots
            .range(range)
            .map(|(k, &s)| (k, &self.metas[s as usize]))
    }

    /// All entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&ChunkKey, &ChunkMeta)> + '_ {
        self.range(..)
    }
}

impl Index<&ChunkKey> for ChunkIndex {
    type Output = ChunkMeta;

    fn index(&self, key: &ChunkKey) -> &ChunkMeta {
        self.get(key).expect("chunk in the index")
    }
}

#[cfg(test)]
mod tests {
    use super::{ChunkIndex, ChunkKey, ChunkMeta, ClientIdentity};

    fn meta(record_off: u32) -> ChunkMeta {
        ChunkMeta::new(record_off, 1, true, 0, ClientIdentity::default())
    }

    #[test]
    fn slots_are_reused_and_stay_put() {
        let mut index = ChunkIndex::default();
        let (a, b, c) = (
            ChunkKey::new(1, 1, 0),
            ChunkKey::new(1, 1, 1),
            ChunkKey::new(1, 2, 0),
        );
        index.insert(a, meta(0));
        index.insert(b, meta(16));
        let slot_b = index.slot(&b).unwrap();
        let gen = index.generation();
        index.insert(b, meta(32)); // Replacing keeps the slot.
        assert_eq!((index.slot(&b), index.generation()), (Some(slot_b), gen));
        assert_eq!(index.at(slot_b).record_off, 32);
        assert_eq!(index.remove(&a).map(|m| m.record_off), Some(0));
        assert!(index.generation() > gen);
        index.insert(c, meta(48));
        assert_eq!(index.len(), 2);
        assert_eq!(index.metas.len(), 2, "the freed slot was reused");
        assert_eq!(index.at(index.slot(&b).unwrap()).record_off, 32);
        let keys: Vec<_> = index.iter().map(|(k, m)| (*k, m.record_off)).collect();
        assert_eq!(keys, vec![(b, 32), (c, 48)]);
        assert!(index.get(&a).is_none() && index.remove(&a).is_none());
    }

    #[test]
    fn key_order_is_field_by_field() {
        let vals16 = [0u16, 1, 0x7fff, 0x8000, u16::MAX];
        let vals32 = [0u32, 1, 0x7fff_ffff, 0x8000_0000, u32::MAX];
        let mut keys = Vec::new();
        for p in vals16 {
            for w in vals16 {
                for c in vals32 {
                    keys.push(ChunkKey::new(p, w, c));
                }
            }
        }
        for a in &keys {
            for b in &keys {
                let fields = (a.producer_id, a.writer_id, a.chunk_id).cmp(&(
                    b.producer_id,
                    b.writer_id,
                    b.chunk_id,
                ));
                assert_eq!(a.cmp(b), fields, "{a:?} vs {b:?}");
            }
        }
    }
}

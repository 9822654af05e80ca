//! The lookaside index: one entry per chunk record held in the buffer,
//! ordered by `(producer_id, writer_id, chunk_id)` so that a sequence's
//! chunks are adjacent and patches find their chunk quickly.

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

#[cfg(test)]
mod tests {
    use super::ChunkKey;

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

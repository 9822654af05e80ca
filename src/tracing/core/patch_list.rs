//! A writer's size fields that live in chunks it already gave back.
//!
//! When a nested message spans a chunk boundary, its 4-byte length sits in
//! a chunk the writer has returned to the arbiter. The writer then keeps
//! the length here, addressed by a stable sequence number, and fills it
//! when the message ends. The arbiter sends filled entries in order, from
//! the front (as `chunks_to_patch`, or by writing straight into the SMB when
//! the chunk is still there).

use std::collections::VecDeque;

use super::smb_abi::PATCH_SIZE;

/// One pending size field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingPatch {
    pub chunk_id: u32,
    /// Offset from the first payload byte of the chunk.
    pub offset: u16,
    pub data: [u8; PATCH_SIZE],
    /// Set once `data` holds the final length.
    pub ready: bool,
}

/// FIFO of pending patches with stable handles.
#[derive(Debug, Default)]
pub struct PatchList {
    items: VecDeque<PendingPatch>,
    /// Handle of `items[0]`.
    base_seq: u64,
}

impl PatchList {
    /// Adds an unfilled patch; returns its handle.
    pub fn push(&mut self, chunk_id: u32, offset: u16) -> u64 {
        self.items.push_back(PendingPatch {
            chunk_id,
            offset,
            data: [0; PATCH_SIZE],
            ready: false,
        });
        self.base_seq + self.items.len() as u64 - 1
    }

    /// Fills the patch with handle `seq` (ignored if already sent).
    pub fn fill(&mut self, seq: u64, data: [u8; PATCH_SIZE]) {
        let Some(i) = seq.checked_sub(self.base_seq) else {
            return;
        };
        if let Some(p) = self.items.get_mut(i as usize) {
            p.data = data;
            p.ready = true;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True if the first patch is filled and can be sent.
    pub fn front_ready(&self) -> bool {
        self.items.front().is_some_and(|p| p.ready)
    }

    pub fn front(&self) -> Option<&PendingPatch> {
        self.items.front()
    }

    /// Removes and returns the first patch if it is ready.
    pub fn pop_ready(&mut self) -> Option<PendingPatch> {
        if !self.front_ready() {
            return None;
        }
        self.base_seq += 1;
        self.items.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_survive_pops() {
        let mut l = PatchList::default();
        let a = l.push(1, 10);
        let b = l.push(1, 20);
        let c = l.push(2, 0);
        l.fill(b, [2; 4]);
        assert!(l.pop_ready().is_none(), "front not ready");
        l.fill(a, [1; 4]);
        assert_eq!(l.pop_ready().unwrap().offset, 10);
        assert_eq!(l.pop_ready().unwrap().data, [2; 4]);
        assert!(l.pop_ready().is_none());
        l.fill(a, [9; 4]); // stale handle: ignored
        l.fill(c, [3; 4]);
        assert_eq!(
            l.pop_ready().unwrap(),
            PendingPatch {
                chunk_id: 2,
                offset: 0,
                data: [3; 4],
                ready: true
            }
        );
        assert!(l.is_empty());
    }
}

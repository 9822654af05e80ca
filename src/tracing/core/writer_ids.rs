//! Writer ids 1..=32767 for one producer.

use super::commit_batch::WriterId;
use super::smb_abi::MAX_WRITER_ID;

/// Writer ids 1..=32767, handed out round-robin so a freed id is not
/// reused immediately.
pub(super) struct WriterIdAllocator {
    used: Vec<bool>,
    last: u16,
    in_use: usize,
}

impl Default for WriterIdAllocator {
    fn default() -> Self {
        WriterIdAllocator {
            used: vec![false; MAX_WRITER_ID as usize + 1],
            last: 0,
            in_use: 0,
        }
    }
}

impl WriterIdAllocator {
    pub(super) fn allocate(&mut self) -> Option<WriterId> {
        if self.in_use >= MAX_WRITER_ID as usize {
            return None;
        }
        let mut id = self.last;
        loop {
            id = if id >= MAX_WRITER_ID { 1 } else { id + 1 };
            if !self.used[id as usize] {
                self.used[id as usize] = true;
                self.last = id;
                self.in_use += 1;
                return Some(id);
            }
        }
    }

    pub(super) fn free(&mut self, id: WriterId) {
        if let Some(u) = self.used.get_mut(id as usize) {
            if *u {
                *u = false;
                self.in_use -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_ids_cover_the_range_and_are_recycled() {
        let mut a = WriterIdAllocator::default();
        assert_eq!(a.allocate(), Some(1));
        assert_eq!(a.allocate(), Some(2));
        a.free(1);
        assert_eq!(a.allocate(), Some(3), "not reused at once");
        for _ in 3..MAX_WRITER_ID {
            assert!(a.allocate().is_some());
        }
        assert_eq!(a.allocate(), Some(1), "wraps to the freed id");
        assert_eq!(a.allocate(), None, "all 32767 in use");
        a.free(0);
        a.free(40000);
        a.free(7);
        assert_eq!(a.allocate(), Some(7));
    }
}

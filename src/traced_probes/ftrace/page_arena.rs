//! A reusable buffer that raw pages are read straight into.
//!
//! `read()` needs an initialised destination. Growing a `Vec` for every
//! read would zero (or copy) each page once more; the arena zeroes its
//! memory once, keeps it, and tracks how much holds pages.
//!
//! The data starts on a 64-byte boundary: the kernel copies page-aligned
//! pages into it, and a destination 16 bytes into a page (where a large
//! allocation starts) makes that copy several times slower on some CPUs
//! (see `crate::mem::skew_copy`).

/// Pages of one cpu for one drain.
#[derive(Debug, Default)]
pub struct PageArena {
    /// Initialised memory; only `start..start + used` holds data.
    mem: Vec<u8>,
    /// Where the aligned data starts in `mem`.
    start: usize,
    used: usize,
}

/// Above this size the memory is given back after a flush or burst.
const KEEP_BYTES: usize = 2 << 20;

/// Alignment of the data.
const ALIGN: usize = 64;

impl PageArena {
    /// The bytes read so far.
    pub fn data(&self) -> &[u8] {
        &self.mem[self.start..self.start + self.used]
    }

    pub fn len(&self) -> usize {
        self.used
    }

    /// Bytes allocated.
    pub fn capacity(&self) -> usize {
        self.mem.len()
    }

    pub fn is_empty(&self) -> bool {
        self.used == 0
    }

    /// Forgets the data, keeping a moderate allocation.
    pub fn clear(&mut self) {
        self.used = 0;
        if self.mem.len() > KEEP_BYTES {
            self.mem = Vec::new();
            self.start = 0;
        }
    }

    /// At least `n` writable bytes after the data (contents unspecified).
    pub fn spare(&mut self, n: usize) -> &mut [u8] {
        let need = self.start + self.used + n;
        if self.mem.len() < need {
            self.grow(self.used + n);
        }
        let at = self.start + self.used;
        &mut self.mem[at..at + n]
    }

    /// Room for `bytes` of data, moving what is there to the new aligned
    /// start.
    #[cold]
    fn grow(&mut self, bytes: usize) {
        let size = (bytes + ALIGN).max(2 * self.mem.len());
        self.mem.resize(size, 0);
        let start = self.mem.as_ptr().align_offset(ALIGN).min(ALIGN);
        if start != self.start {
            let (from, used) = (self.start, self.used);
            self.mem.copy_within(from..from + used, start);
            self.start = start;
        }
    }

    /// Marks `n` bytes of [`spare`](Self::spare) as data.
    pub fn commit(&mut self, n: usize) {
        self.used = (self.used + n).min(self.mem.len() - self.start);
    }

    /// Appends bytes.
    pub fn extend(&mut self, b: &[u8]) {
        self.spare(b.len()).copy_from_slice(b);
        self.commit(b.len());
    }

    /// Drops the data from `at` on and returns it (for a partial page).
    pub fn split_off(&mut self, at: usize) -> Vec<u8> {
        let at = at.min(self.used);
        let tail = self.data()[at..].to_vec();
        self.used = at;
        tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_land_after_the_data_and_memory_is_reused() {
        let mut a = PageArena::default();
        a.extend(b"abc");
        let s = a.spare(4);
        s.copy_from_slice(b"defg");
        a.commit(2);
        assert_eq!(a.data(), b"abcde");
        assert_eq!(a.split_off(4), b"e");
        assert_eq!(a.data(), b"abcd");
        a.clear();
        assert!(a.is_empty());
        // Stale bytes stay in memory but are not data.
        assert_eq!(a.spare(3).len(), 3);
        assert_eq!(a.len(), 0);
        a.commit(usize::MAX);
        assert!(a.len() <= a.mem.len());
    }

    #[test]
    fn data_stays_aligned_and_intact_as_the_arena_grows() {
        let mut a = PageArena::default();
        let mut want = Vec::new();
        for i in 0..200u32 {
            let n = 1 + (i as usize * 977) % 5000;
            let piece: Vec<u8> = (0..n).map(|k| (k as u32 ^ i) as u8).collect();
            a.extend(&piece);
            want.extend_from_slice(&piece);
            assert_eq!(a.data().as_ptr() as usize % ALIGN, 0);
            assert_eq!(a.data(), &want[..]);
        }
        let spare = a.spare(4096).as_ptr() as usize;
        assert_eq!((spare - a.data().as_ptr() as usize), a.len());
    }

    #[test]
    fn big_bursts_give_memory_back() {
        let mut a = PageArena::default();
        a.spare(KEEP_BYTES + 1);
        a.commit(KEEP_BYTES + 1);
        a.clear();
        assert_eq!(a.mem.len(), 0);
    }
}

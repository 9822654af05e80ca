//! A reusable buffer that raw pages are read straight into.
//!
//! `read()` needs an initialised destination. Growing a `Vec` for every
//! read would zero (or copy) each page once more; the arena zeroes its
//! memory once, keeps it, and tracks how much holds pages.

/// Pages of one cpu for one drain.
#[derive(Debug, Default)]
pub struct PageArena {
    /// Initialised memory; only `..used` holds data.
    mem: Vec<u8>,
    used: usize,
}

/// Above this size the memory is given back after a flush or burst.
const KEEP_BYTES: usize = 2 << 20;

impl PageArena {
    /// The bytes read so far.
    pub fn data(&self) -> &[u8] {
        &self.mem[..self.used]
    }

    pub fn len(&self) -> usize {
        self.used
    }

    pub fn is_empty(&self) -> bool {
        self.used == 0
    }

    /// Forgets the data, keeping a moderate allocation.
    pub fn clear(&mut self) {
        self.used = 0;
        if self.mem.len() > KEEP_BYTES {
            self.mem = Vec::new();
        }
    }

    /// At least `n` writable bytes after the data (contents unspecified).
    pub fn spare(&mut self, n: usize) -> &mut [u8] {
        let need = self.used + n;
        if self.mem.len() < need {
            self.mem.resize(need.max(2 * self.mem.len()), 0);
        }
        &mut self.mem[self.used..need]
    }

    /// Marks `n` bytes of [`spare`](Self::spare) as data.
    pub fn commit(&mut self, n: usize) {
        self.used = (self.used + n).min(self.mem.len());
    }

    /// Appends bytes.
    pub fn extend(&mut self, b: &[u8]) {
        self.spare(b.len()).copy_from_slice(b);
        self.commit(b.len());
    }

    /// Drops the data from `at` on and returns it (for a partial page).
    pub fn split_off(&mut self, at: usize) -> Vec<u8> {
        let at = at.min(self.used);
        let tail = self.mem[at..self.used].to_vec();
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
    fn big_bursts_give_memory_back() {
        let mut a = PageArena::default();
        a.spare(KEEP_BYTES + 1);
        a.commit(KEEP_BYTES + 1);
        a.clear();
        assert_eq!(a.mem.len(), 0);
    }
}

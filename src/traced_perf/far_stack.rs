//! Words of a user stack past the sample's copy: a stack deeper than the
//! 64 KiB the kernel copies goes on in the process, and upstream's
//! traced_perf reads it from `/proc/PID/mem` (the copy overlaid on the
//! process's memory). The read comes later than the sample, but the
//! frames past the copy are the outermost, oldest ones, which a running
//! leaf does not change. Bounded per sample: [`MAX_PAGES`] pages read whole
//! (one read per page, not per word), only above the copy and within
//! [`MAX_REACH`] of the stack pointer.

/// Pages read past the copy for one sample at most (64 KiB more stack).
pub const MAX_PAGES: usize = 16;
const PAGE: u64 = 4096;
/// How far above the stack pointer a word may be read (the usual 8 MiB
/// stack limit).
pub const MAX_REACH: u64 = 8 << 20;

/// The pages of one sample's stack read so far past its copy.
#[derive(Default)]
pub struct FarStack {
    /// Start address of each page in `bytes`, in read order.
    pages: Vec<u64>,
    bytes: Vec<u8>,
    /// The copy spans [lo, hi); reads go to [hi, lo + MAX_REACH).
    lo: u64,
    hi: u64,
    /// A read was refused (the budget, or the process's memory).
    pub refused: bool,
}

impl FarStack {
    /// Starts over for a sample whose copy is `len` bytes from `sp`.
    pub fn reset(&mut self, sp: u64, len: usize) {
        self.pages.clear();
        self.bytes.clear();
        self.lo = sp;
        self.hi = sp.saturating_add(len as u64);
        self.refused = false;
    }

    /// Pages read for this sample.
    pub fn pages_read(&self) -> usize {
        self.pages.len()
    }

    /// The word at `addr` past the copy, reading its page with `read`
    /// (`read(page_addr, buf)` fills the page or fails) the first time.
    pub fn word(
        &mut self,
        addr: u64,
        word: usize,
        read: &mut dyn FnMut(u64, &mut [u8]) -> bool,
    ) -> Option<u64> {
        if addr < self.hi || addr >= self.lo.saturating_add(MAX_REACH) {
            return None;
        }
        let page = addr & !(PAGE - 1);
        let off = (addr - page) as usize;
        if off + word > PAGE as usize {
            return None;
        }
        let i = match self.pages.iter().position(|&p| p == page) {
            Some(i) => i,
            None => {
                if self.pages.len() >= MAX_PAGES {
                    self.refused = true;
                    return None;
                }
                let at = self.bytes.len();
                self.bytes.resize(at + PAGE as usize, 0);
                if !read(page, &mut self.bytes[at..]) {
                    self.bytes.truncate(at);
                    self.refused = true;
                    return None;
                }
                self.pages.push(page);
                self.pages.len() - 1
            }
        };
        let b = &self.bytes[i * PAGE as usize + off..][..word];
        Some(if word == 8 {
            u64::from_ne_bytes(b.try_into().ok()?)
        } else {
            u32::from_ne_bytes(b.try_into().ok()?) as u64
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_past_the_copy_a_page_at_a_time_within_bounds() {
        let mut f = FarStack::default();
        let sp = 0x7000_0000;
        f.reset(sp, 0x1000);
        let reads = std::cell::RefCell::new(Vec::new());
        let mut read = |page: u64, buf: &mut [u8]| {
            reads.borrow_mut().push(page);
            for (i, b) in buf.iter_mut().enumerate() {
                *b = (i % 251) as u8;
            }
            true
        };
        // Inside the copy: not ours.
        assert_eq!(f.word(sp + 8, 8, &mut read), None);
        let w = f.word(sp + 0x1010, 8, &mut read).unwrap();
        assert_eq!(w.to_ne_bytes()[0], 16);
        // Same page: no second read.
        f.word(sp + 0x1018, 8, &mut read).unwrap();
        assert_eq!(*reads.borrow(), vec![sp + 0x1000]);
        // Past the reach, or below the stack pointer: refused.
        assert_eq!(f.word(sp + MAX_REACH, 8, &mut read), None);
        assert_eq!(f.word(sp - 8, 8, &mut read), None);
        // The page budget.
        for i in 1..MAX_PAGES as u64 {
            assert!(f.word(sp + 0x1000 + i * PAGE, 8, &mut read).is_some());
        }
        assert!(!f.refused);
        assert_eq!(f.word(sp + 0x1000 + 100 * PAGE, 8, &mut read), None);
        assert!(f.refused);
        assert_eq!(f.pages_read(), MAX_PAGES);
        // A failed read is refused, and the next sample starts over.
        f.reset(sp, 0);
        assert_eq!(f.word(sp, 8, &mut |_, _| false), None);
        assert!(f.refused && f.pages_read() == 0);
    }
}

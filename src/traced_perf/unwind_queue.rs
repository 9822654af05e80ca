//! The samples waiting for their user stacks to be unwound (upstream's
//! unwind queue): at most [`UNWIND_QUEUE_CAPACITY`] samples holding less
//! than max_enqueued_footprint_kb of stack copies, counting those held
//! back until their process's unwind tables are loaded. A sample that
//! finds no room is skipped at enqueue by the caller, as upstream does.

use std::collections::VecDeque;

use super::config::UNWIND_QUEUE_CAPACITY;
use super::records::Sample;

pub struct UnwindQueue {
    ready: VecDeque<Sample>,
    /// Waiting for unwind tables the helper thread reads.
    held: Vec<Sample>,
    /// Stack bytes of both.
    bytes: usize,
    footprint: usize,
}

impl UnwindQueue {
    pub fn new(footprint_bytes: usize) -> UnwindQueue {
        UnwindQueue {
            ready: VecDeque::new(),
            held: Vec::new(),
            bytes: 0,
            footprint: footprint_bytes,
        }
    }

    /// Whether a sample with `stack_bytes` of stack fits.
    pub fn has_room(&self, stack_bytes: usize) -> bool {
        self.ready.len() + self.held.len() < UNWIND_QUEUE_CAPACITY
            && self.bytes + stack_bytes < self.footprint
    }

    pub fn push(&mut self, s: Sample) {
        self.bytes += s.stack.len();
        self.ready.push_back(s);
    }

    /// The oldest sample not held.
    pub fn pop(&mut self) -> Option<Sample> {
        let s = self.ready.pop_front()?;
        self.bytes -= s.stack.len();
        Some(s)
    }

    /// A popped sample kept until its tables are in (within the bounds:
    /// it had its room).
    pub fn hold(&mut self, s: Sample) {
        self.bytes += s.stack.len();
        self.held.push(s);
    }

    /// The held samples are tried again, after the others (samples are
    /// written in any order: readers sort them by time).
    pub fn release_held(&mut self) {
        while let Some(s) = self.held.pop() {
            self.ready.push_back(s);
        }
    }

    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    pub fn has_held(&self) -> bool {
        !self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(time: u64, stack: usize) -> Sample {
        Sample {
            time,
            stack: vec![0; stack],
            ..Default::default()
        }
    }

    #[test]
    fn the_footprint_and_the_capacity_bound_it_held_samples_included() {
        let mut q = UnwindQueue::new(10_000);
        for t in 0..3 {
            assert!(q.has_room(3000));
            q.push(sample(t, 3000));
        }
        // 9000 bytes queued: another 3000 would pass the footprint.
        assert!(!q.has_room(3000));
        assert!(q.has_room(999));
        // Held samples still count.
        let s = q.pop().unwrap();
        assert!(q.has_room(3000));
        q.hold(s);
        assert!(!q.has_room(3000));
        // Emptied: room again, for as many samples as the capacity.
        q.release_held();
        assert_eq!(std::iter::from_fn(|| q.pop()).count(), 3);
        assert!(q.has_room(9999));
        let mut q = UnwindQueue::new(usize::MAX);
        for t in 0..UNWIND_QUEUE_CAPACITY as u64 {
            assert!(q.has_room(0));
            q.push(sample(t, 0));
        }
        assert!(!q.has_room(0));
        let s = q.pop().unwrap();
        q.hold(s);
        assert!(!q.has_room(0), "a held sample keeps its place");
    }

    #[test]
    fn held_samples_come_back_after_the_others() {
        let mut q = UnwindQueue::new(1 << 20);
        for t in 0..5 {
            q.push(sample(t, 8));
        }
        let (a, b) = (q.pop().unwrap(), q.pop().unwrap());
        q.hold(a);
        q.hold(b);
        assert!(q.has_held());
        q.release_held();
        assert!(!q.has_held());
        let order: Vec<u64> = std::iter::from_fn(|| q.pop()).map(|s| s.time).collect();
        assert_eq!(order, vec![2, 3, 4, 1, 0]);
        assert!(!q.has_ready() && q.has_room(1 << 19));
    }
}

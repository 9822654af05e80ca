//! [`SharedMem`]: the one wrapper through which the SMB is touched.
//!
//! The shared memory buffer is mapped into two processes. The other side may
//! be buggy or hostile and may change any byte at any time, so no Rust
//! reference to plain bytes (`&[u8]`) into the region is ever handed out.
//! Instead:
//!
//! * control words (page bitmaps, chunk header fields) are reached as
//!   `&AtomicU32` / `&AtomicU16` at naturally aligned offsets;
//! * payload bytes are copied in and out with bounds-checked raw copies.
//!
//! Every access checks `offset + len <= self.len()`, so a bad offset is a
//! `None`/`false`, never an out-of-bounds access. This file holds all the
//! `unsafe` of the SMB code; the OS mapping itself is made in
//! `crate::base::shm`, which hands it over with [`SharedMem::from_raw_mapping`].

/// SMB size limits (bytes): the largest buffer anyone may map, and the
/// smallest page (the size must be a multiple of it).
pub const MAX_SHM_SIZE: usize = 32 * 1024 * 1024;
pub const MIN_PAGE_SIZE: usize = 4096;

use std::alloc::Layout;
use std::any::Any;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, AtomicU32};

/// Alignment of heap-backed regions; mappings are page aligned anyway.
const HEAP_ALIGN: usize = 4096;

enum Owner {
    /// Memory from the global allocator (tests, in-process use).
    Heap(Layout),
    /// Something that keeps a mapping alive and unmaps it on drop.
    Mapping(#[allow(dead_code)] Box<dyn Any + Send + Sync>),
}

/// A fixed-size byte region that another process may also be using.
pub struct SharedMem {
    ptr: NonNull<u8>,
    len: usize,
    owner: Owner,
}

// SAFETY: the region is plain memory; all accesses go through atomics or raw
// copies that tolerate concurrent modification (see the module docs), so
// sharing the handle across threads adds no hazard beyond the cross-process
// one the ABI is designed for.
unsafe impl Send for SharedMem {}
// SAFETY: as above; no method hands out a non-atomic reference.
unsafe impl Sync for SharedMem {}

impl std::fmt::Debug for SharedMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedMem")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

impl SharedMem {
    /// Zeroed, 4 KiB-aligned memory owned by this process. Used for tests and
    /// in-process producers. Returns `None` for `len == 0` or if the
    /// allocation fails.
    pub fn new_heap(len: usize) -> Option<SharedMem> {
        if len == 0 {
            return None;
        }
        let layout = Layout::from_size_align(len, HEAP_ALIGN).ok()?;
        // SAFETY: `layout` has a non-zero size (checked above).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw)?;
        Some(SharedMem {
            ptr,
            len,
            owner: Owner::Heap(layout),
        })
    }

    /// Wraps an existing mapping.
    ///
    /// # Safety
    /// * `ptr..ptr+len` must be mapped readable and writable, 4-byte aligned,
    ///   and stay mapped until `owner` is dropped (the wrapper drops `owner`
    ///   last, after which it never touches the memory again).
    /// * Nothing in this process may hold Rust references (`&[u8]`,
    ///   `&mut [u8]`) into the region while the wrapper exists.
    pub unsafe fn from_raw_mapping(
        ptr: NonNull<u8>,
        len: usize,
        owner: Box<dyn Any + Send + Sync>,
    ) -> SharedMem {
        debug_assert!((ptr.as_ptr() as usize).is_multiple_of(4));
        SharedMem {
            ptr,
            len,
            owner: Owner::Mapping(owner),
        }
    }

    /// Size of the region in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: regions are never empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn in_bounds(&self, offset: usize, n: usize) -> bool {
        matches!(offset.checked_add(n), Some(end) if end <= self.len)
    }

    /// The 32-bit word at `offset`, if aligned and in bounds.
    #[inline]
    pub fn atomic_u32(&self, offset: usize) -> Option<&AtomicU32> {
        if !offset.is_multiple_of(4) || !self.in_bounds(offset, 4) {
            return None;
        }
        // SAFETY:
        // * in bounds and 4-byte aligned (the base is 4 KiB aligned);
        // * AtomicU32 has the size and layout of u32, and every bit pattern is
        //   valid, so whatever the peer wrote is a valid value;
        // * the lifetime is tied to `&self`, which keeps the memory alive.
        Some(unsafe { &*(self.ptr.as_ptr().add(offset) as *const AtomicU32) })
    }

    /// The 16-bit word at `offset`, if aligned and in bounds.
    #[inline]
    pub fn atomic_u16(&self, offset: usize) -> Option<&AtomicU16> {
        if !offset.is_multiple_of(2) || !self.in_bounds(offset, 2) {
            return None;
        }
        // SAFETY: as in `atomic_u32`, with 2-byte alignment and size.
        Some(unsafe { &*(self.ptr.as_ptr().add(offset) as *const AtomicU16) })
    }

    /// Copies `dst.len()` bytes starting at `offset` out of the region.
    /// Returns false (copying nothing) if the range is out of bounds.
    #[inline]
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> bool {
        if !self.in_bounds(offset, dst.len()) {
            return false;
        }
        // SAFETY:
        // * source range checked in bounds above; `dst` is a distinct local
        //   buffer, so the ranges do not overlap;
        // * the peer may modify the source concurrently; we only ever copy
        //   bytes (any value is valid) and never form a reference to them.
        unsafe {
            crate::mem::skew_copy::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                dst.as_mut_ptr(),
                dst.len(),
            )
        };
        true
    }

    /// Appends `n` bytes starting at `offset` to `out`. Returns false
    /// (appending nothing) if the range is out of bounds.
    pub fn read_append(&self, offset: usize, n: usize, out: &mut Vec<u8>) -> bool {
        if !self.in_bounds(offset, n) {
            return false;
        }
        out.reserve(n);
        let old = out.len();
        // SAFETY:
        // * source range checked in bounds; destination has `n` spare bytes
        //   after `reserve`, and belongs to a Vec, so no overlap;
        // * `set_len` only after all `n` bytes were initialised by the copy.
        unsafe {
            crate::mem::skew_copy::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                out.as_mut_ptr().add(old),
                n,
            );
            out.set_len(old + n);
        }
        true
    }

    /// Copies `src` into the region at `offset`. Returns false (writing
    /// nothing) if the range is out of bounds.
    #[inline]
    pub fn write(&self, offset: usize, src: &[u8]) -> bool {
        if !self.in_bounds(offset, src.len()) {
            return false;
        }
        // SAFETY: destination range checked in bounds; `src` is caller memory
        // outside the region (callers never hold references into it), so the
        // ranges do not overlap. Writes through a shared handle are fine: the
        // region is never exposed as `&[u8]`.
        unsafe {
            crate::mem::skew_copy::copy_nonoverlapping(
                src.as_ptr(),
                self.ptr.as_ptr().add(offset),
                src.len(),
            )
        };
        true
    }

    /// Sets `n` bytes at `offset` to `byte`. False if out of bounds.
    pub fn fill(&self, offset: usize, n: usize, byte: u8) -> bool {
        if !self.in_bounds(offset, n) {
            return false;
        }
        // SAFETY: destination range checked in bounds.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(offset), byte, n) };
        true
    }

    /// Moves `n` bytes from `src` to `dst` inside the region (ranges may
    /// overlap). False if either range is out of bounds.
    pub fn copy_within(&self, src: usize, dst: usize, n: usize) -> bool {
        if !self.in_bounds(src, n) || !self.in_bounds(dst, n) {
            return false;
        }
        // SAFETY: both ranges checked in bounds; `copy` handles overlap.
        unsafe { std::ptr::copy(self.ptr.as_ptr().add(src), self.ptr.as_ptr().add(dst), n) };
        true
    }
}

impl Drop for SharedMem {
    fn drop(&mut self) {
        if let Owner::Heap(layout) = self.owner {
            // SAFETY: `ptr` came from `alloc_zeroed(layout)` in `new_heap` and
            // is freed exactly once, here.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
        // A mapping owner unmaps when the `owner` field drops after this.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn bounds_and_alignment_are_checked() {
        let m = SharedMem::new_heap(64).unwrap();
        assert!(m.atomic_u32(60).is_some());
        assert!(m.atomic_u32(62).is_none());
        assert!(m.atomic_u32(64).is_none());
        assert!(m.atomic_u32(usize::MAX - 1).is_none());
        assert!(m.atomic_u16(62).is_some());
        assert!(m.atomic_u16(63).is_none());
        assert!(!m.write(61, &[0; 4]));
        assert!(!m.write(usize::MAX, &[1]));
        let mut b = [0u8; 5];
        assert!(!m.read(60, &mut b));
        let mut v = Vec::new();
        assert!(!m.read_append(usize::MAX - 2, 4, &mut v));
        assert!(v.is_empty());
        assert!(!m.copy_within(0, 61, 4));
        assert!(m.new_heap_is_zeroed());
    }

    #[test]
    fn bytes_and_atomics_alias() {
        let m = SharedMem::new_heap(16).unwrap();
        m.atomic_u32(4)
            .unwrap()
            .store(0x0403_0201, Ordering::Relaxed);
        let mut b = [0u8; 4];
        assert!(m.read(4, &mut b));
        assert_eq!(b, [1, 2, 3, 4]);
        assert!(m.write(8, &[9, 8]));
        assert_eq!(m.atomic_u16(8).unwrap().load(Ordering::Relaxed), 0x0809);
        assert!(m.copy_within(4, 5, 4));
        let mut v = Vec::new();
        assert!(m.read_append(4, 5, &mut v));
        assert_eq!(v, [1, 1, 2, 3, 4]);
        assert!(m.fill(4, 2, 0xaa));
        assert!(m.read(4, &mut b));
        assert_eq!(b, [0xaa, 0xaa, 2, 3]);
    }

    impl SharedMem {
        fn new_heap_is_zeroed(&self) -> bool {
            let mut v = Vec::new();
            self.read_append(0, self.len(), &mut v) && v.iter().all(|&b| b == 0)
        }
    }
}

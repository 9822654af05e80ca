//! Where a chunk's body comes from when it is copied into the buffer.

/// A chunk body the buffer copies into a record. It is read exactly once,
/// straight into place: a body in a producer's shared memory needs no
/// staging copy, and a producer scribbling on it meanwhile can only
/// corrupt its own data.
pub trait ChunkPayload {
    /// Bytes in the body.
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies the whole body into `dst`, which is exactly
    /// [`len`](Self::len) bytes long.
    fn copy_to(&self, dst: &mut [u8]);
}

impl ChunkPayload for &[u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }

    fn copy_to(&self, dst: &mut [u8]) {
        crate::mem::skew_copy::copy_bytes(dst, self);
    }
}

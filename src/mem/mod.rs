//! Memory below every layer: the one wrapper through which shared memory
//! is read and written ([`shared_mem`]), and bulk copies that avoid a slow
//! memcpy case ([`skew_copy`]). Pure: the OS mapping itself is made in
//! `base::shm` and handed over.

pub mod shared_mem;
pub mod skew_copy;

//! Memory below every layer: the one wrapper through which shared memory
//! is read and written ([`shared_mem`]), bulk copies that avoid a slow
//! memcpy case ([`skew_copy`]), and the small sorted map the daemons' tables
//! use instead of a `BTreeMap` per type ([`small_map`]). Pure: the OS
//! mapping itself is made in `base::shm` and handed over.

pub mod shared_mem;
pub mod skew_copy;
pub mod small_map;

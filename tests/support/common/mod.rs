//! Test helpers shared by the SMB integration tests: a seeded PRNG, a
//! random protobuf generator, and a minimal service that copies committed
//! chunks out of the SMB, applies patches and reassembles packets (the
//! FACTS d.2 rules, for one in-order reader per writer).
#![allow(dead_code)]

pub mod fake_service;
pub mod gen;

//! Linux ftrace: tracefs control, format/page parsing, proto translation and
//! per-cpu readers.
//!
//! `format`, `page_parser` and `translate` are pure (bytes in, events out);
//! `tracefs`, `sys` and `cpu_reader` do the I/O.

pub mod bundle;
pub mod compact_sched;
pub mod cpu_reader;
pub mod format;
pub mod page_parser;
pub(crate) mod sys;
pub mod stats;
pub mod table;
pub mod tracefs;
pub mod translate;

pub use tracefs::{CpuStats, Tracefs};

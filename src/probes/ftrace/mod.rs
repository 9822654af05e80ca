//! Linux ftrace: tracefs control, format/page parsing, proto translation and
//! per-cpu readers.
//!
//! Pure (bytes in, protobuf out; no OS access): `format`, `page_parser`,
//! `table`, `translate`, `compact_sched`, `bundle`, `stats`, `atrace`.
//! I/O: `tracefs` (all tracefs files), `sys` (raw syscalls), `cpu_reader`
//! (splice workers).
//!
//! Typical use by the linux.ftrace data source:
//! 1. `Tracefs::discover()?.create_instance(..)` or the root; configure it
//!    (`set_buffer_size_kb`, `set_clock`, `enable_event`, `set_tracing_on`);
//! 2. `tracefs.translation_table()` and `tracefs.page_header_layout()`;
//!    `compact_sched::for_table(..)` (validate on the sched_switch/sched_waking formats);
//! 3. `cpu_reader::FtraceReader::start(..)`; every drain period call
//!    `drain(|cpu, pages| bundle::write_pages(..))`, on flush `flush(..)`;
//! 4. `stats::write_ftrace_stats` at start and end; `tracefs.reset(..)`.

pub mod atrace;
pub mod bundle;
pub mod compact_sched;
pub mod cpu_reader;
pub mod format;
pub mod ksyms;
pub mod packet_buf;
pub mod page_arena;
pub mod page_parser;
pub mod print_filter;
pub mod stats;
pub(crate) mod sys;
pub mod syscalls;
pub mod table;
pub mod tracefs;
pub mod translate;

pub use tracefs::{CpuStats, Tracefs};

//! The pure ftrace layer: bytes in, protobuf out, no OS access
//! (`scripts/check-layering.sh` enforces it).
//!
//! [`format`] parses tracefs format files, [`page_parser`] walks ring
//! buffer pages, [`table`] + [`translate`] map kernel fields to proto
//! fields, [`bundle`] writes FtraceEventBundle packets (with
//! [`compact_sched`], [`print_filter`], [`syscalls`] and [`ksyms`]),
//! [`stats`] writes FtraceStats, [`kprobes`] maps `kprobe_events` to
//! tracefs lines, [`funcgraph`] checks function_graph patterns, [`atrace`] maps atrace categories to
//! kernel events.

pub mod atrace;
pub mod bundle;
pub mod compact_sched;
pub mod format;
pub mod funcgraph;
pub mod kprobes;
pub mod ksyms;
pub mod packet_buf;
pub mod page_parser;
pub mod print_filter;
pub mod stats;
pub mod syscalls;
pub mod table;
pub mod translate;

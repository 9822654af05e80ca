//! Linux ftrace, the `linux.ftrace` data source.
//!
//! * [`parse`]: the pure layer (bytes in, protobuf out; no OS access):
//!   formats, page parsing, translation, bundling, compact sched, stats.
//! * I/O: [`tracefs`] (every tracefs file), [`sys`] (raw syscalls),
//!   [`cpu_reader`] (splice workers) and its [`page_arena`].
//! * Sharing between sessions: [`mux`] (the multiplexer over sessions) and
//!   its parts: [`instances`] (the instances in use and their users),
//!   [`instance`] (one tracefs instance), [`event_union`] (events on per
//!   instance), [`reading`] (read passes and [`drain_pace`]), [`source`]
//!   (one data source's state and stats), [`syscall_filter`],
//!   [`atrace_runner`], [`crash_state`] (what to undo after a crash),
//!   [`ksyms_load`] (the kernel symbol table, loaded in the background),
//!   [`kprobes`] (the kprobe events we made, machine-wide), [`funcgraph`]
//!   (the function_graph tracer of an instance).
//! * [`data_source`]: the `linux.ftrace` instance the producer holds.
//!
//! Typical use by the data source:
//! 1. `Tracefs::discover()?.create_instance(..)` or the root; configure it
//!    (`set_buffer_size_kb`, `set_clock`, `enable_event`, `set_tracing_on`);
//! 2. `tracefs.translation_table()` and `tracefs.page_header_layout()`;
//!    `parse::compact_sched::for_table(..)`;
//! 3. `cpu_reader::FtraceReader::start(..)`; every drain period call
//!    `drain(|cpu, pages| parse::bundle::write_pages(..))`, on flush `flush(..)`;
//! 4. `parse::stats::write_ftrace_stats` at start and end; `tracefs.reset(..)`.

pub mod atrace_runner;
pub mod cpu_reader;
pub mod crash_state;
pub mod data_source;
pub mod drain_pace;
pub mod event_union;
pub mod funcgraph;
pub mod instance;
pub mod instances;
pub mod kprobes;
pub mod ksyms_load;
pub mod mux;
pub mod ownership;
pub mod page_arena;
pub mod parse;
pub mod reading;
pub mod source;
pub(crate) mod sys;
pub mod syscall_filter;
pub mod tracefs;

pub use parse::stats::CpuStats;
pub use tracefs::Tracefs;

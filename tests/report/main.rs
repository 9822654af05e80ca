//! Integration tests: report. One binary; each module was its own file.

#[path = "../support/mod.rs"]
mod support;

mod report;
mod report_end_line;
mod report_every_source;
mod report_ftrace_pages;
mod report_kernel_counts;
mod report_memory;
mod report_names_clocks;
mod report_synthetic;
mod report_zstd;

//! traced_probes data sources.
//!
//! `ftrace` is the kernel tracer. The pollers (`ps`, `sys_stats`,
//! `system_info`, `power`) read procfs and sysfs through an injectable
//! [`fs_root::FsRoot`], so tests point them at fixture directories and
//! production at `/`. Each poller produces a plain data struct per packet
//! plus an encoder that writes it as a TracePacket body into any
//! `protozero::Stream`.
pub mod fs_root;
pub mod ftrace;
pub mod power;
pub mod ps;
pub mod sys_stats;
pub mod system_info;

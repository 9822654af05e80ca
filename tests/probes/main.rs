//! Integration tests: probes. One binary; each module was its own file.

#[path = "../support/mod.rs"]
mod support;

mod atrace;
mod fake_service;
mod flags;
mod ftrace_options;
mod ftrace_start_stop;
mod ownership;
mod poller_parsers_mutation;
mod process_tree_coverage;
mod ps_first_poll;
mod ps_kept_fds;
mod ps_packets;
mod ps_pidfd_scan;
mod ps_poller;
mod ps_real_proc;
mod real_traced;
mod sys_stats_poller;
mod syscall_sessions;
mod system_info_power;
mod system_info_trace;

//! Every fuzz target's body, for the stable replay runner
//! (tests/fuzz_replay.rs); cargo-fuzz includes each file on its own.

pub mod cli_replies;
pub mod ftrace_format;
pub mod ftrace_ksyms;
pub mod ftrace_page;
pub mod ipc_frame;
pub mod kernel_loss;
pub mod packet_validator;
pub mod pbtx;
pub mod perf_inputs;
pub mod perf_unwind;
pub mod probes_commands;
pub mod proc_pid_files;
pub mod proc_text_files;
pub mod relay_wire;
pub mod report;
pub mod service_commit;
pub mod smb_chunk_reader;
pub mod trace_buffer;
pub mod trace_filter;
pub mod websocket_wire;
pub mod zstd_frame;

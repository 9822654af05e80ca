//! The traced_probes daemon: a producer connected to traced's producer
//! socket, serving `linux.ftrace`, `linux.process_stats`,
//! `linux.sys_stats`, `linux.system_info` and `linux.sysfs_power` from
//! the pollers and parsers in [`crate::probes`].
//!
//! * [`producer`]: the event-loop handler (connection, commands, timers).
//! * [`wire`] / [`link`]: ProducerPort messages and the shared connection
//!   the SMB arbiter commits through.
//! * [`ftrace_mux`]: ftrace shared by concurrent sessions (reading with
//!   `probes::ftrace::cpu_reader`); [`crash_marker`] remembers what to undo
//!   if we die while tracing.
//! * [`sources`]: one small file per data source.

pub mod atrace_runner;
pub mod backoff;
pub mod clock;
pub mod crash_marker;
pub mod data_source;
pub mod drain_pace;
pub mod ftrace_instance;
pub mod ftrace_mux;
pub mod ftrace_syscalls;
pub mod link;
pub mod producer;
pub mod sources;
pub mod stop_signals;
pub mod wire;

use crate::base::event_loop::EventLoop;
use crate::probes::ftrace::Tracefs;

pub use producer::{Producer, ProducerOptions, NOTIFY_ENV};

/// `--reset-ftrace` / `--cleanup-after-crash`: undo a crashed run's state
/// file, then hard-reset every tracefs root.
pub fn hard_reset(state_file: &std::path::Path) -> std::io::Result<()> {
    if let Ok(root) = Tracefs::discover() {
        crash_marker::cleanup(state_file, &root);
    }
    Tracefs::hard_reset_all()
}

/// Runs the daemon until SIGINT/SIGTERM. Returns the exit status.
pub fn run(opts: ProducerOptions) -> i32 {
    // A previous run that died while tracing left its state file behind.
    if opts.state_file.exists() {
        if let Ok(root) = Tracefs::discover() {
            let cleaned = crash_marker::cleanup(&opts.state_file, &root);
            crate::log_warn!("cleaned ftrace state left by a previous run: {cleaned:?}");
        }
    }
    let mut el = match EventLoop::new() {
        Ok(el) => el,
        Err(e) => {
            crate::log_error!("event loop: {e}");
            return 1;
        }
    };
    let mut producer = Producer::new(opts);
    {
        let mut ctl = el.ctl();
        if let Err(e) = producer.watch_stop_signals(&mut ctl) {
            crate::log_error!("signals: {e}");
            return 1;
        }
        producer.start(&mut ctl);
    }
    match el.run(&mut producer) {
        Ok(()) => 0,
        Err(e) => {
            crate::log_error!("event loop: {e}");
            1
        }
    }
}

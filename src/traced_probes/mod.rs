//! The traced_probes daemon: a producer connected to traced's producer
//! socket, serving `linux.ftrace`, `linux.process_stats`,
//! `linux.sys_stats`, `linux.system_info` and `linux.sysfs_power`.
//!
//! One folder per data source, each with its parsers, its reader or poller
//! and its `data_source.rs`: [`ftrace`] (pure page/format layer in
//! `ftrace::parse`), [`ps`], [`sys_stats`], [`system_info`], [`power`].
//! The pollers read procfs and sysfs through [`fs_root::FsRoot`], so tests
//! point them at fixture directories.
//!
//! This level holds what every source shares: [`producer`] (the event-loop
//! handler, shared with traced_perf; [`daemon`] is traced_probes' part), [`wire`] / [`link`] (ProducerPort messages and the connection
//! the SMB arbiter commits through), [`factory`] (SetupDataSource -> an
//! instance), [`data_source`] (the trait), [`backoff`], [`clock`] and
//! [`stop_signals`].

pub mod backoff;
pub mod clock;
pub mod daemon;
pub mod data_source;
pub mod factory;
pub mod fs_root;
pub mod ftrace;
pub mod inline_commit;
pub mod link;
pub mod power;
pub mod producer;
pub mod ps;
pub mod stop_signals;
pub mod sys_stats;
pub mod system_info;
pub mod wire;

use crate::base::event_loop::EventLoop;
use ftrace::Tracefs;

pub use daemon::{Probes, ProbesProducer, NOTIFY_ENV};
pub use producer::Producer;

/// What traced_probes is told at start.
#[derive(Debug, Clone)]
pub struct ProducerOptions {
    /// traced's producer socket (path, `@abstract`, host:port).
    pub socket: String,
    /// Crash state file of the ftrace mux.
    pub state_file: std::path::PathBuf,
    /// Exit (after the teardown) when a registered connection closes,
    /// instead of reconnecting: traced_probes started with an autostarted
    /// traced goes away with it.
    pub exit_with_traced: bool,
}

/// `--reset-ftrace` / `--cleanup-after-crash`: undo a crashed run's state
/// file, then hard-reset the top-level tracefs instance unless a live
/// traced_probes owns it.
pub fn hard_reset(state_file: &std::path::Path) -> std::io::Result<()> {
    if let Ok(root) = Tracefs::discover() {
        ftrace::crash_state::cleanup(state_file, &root);
    }
    match ftrace::ownership::claim("") {
        Ok(_claim) => Tracefs::hard_reset_all().map_err(explain_reset_error),
        Err(why) => {
            // Without root the claim fails first: say why the reset cannot
            // happen, not only that it was skipped.
            if let Some(denied) = tracefs_denied() {
                return Err(denied);
            }
            crate::log_warn!("not resetting ftrace: {why}");
            Ok(())
        }
    }
}

/// tracefs mount points are root-only: to anyone else the files inside
/// look missing. Says "permission denied" (and where) instead of ENOENT.
fn explain_reset_error(e: std::io::Error) -> std::io::Error {
    tracefs_denied().unwrap_or(e)
}

/// "permission denied" for the first tracefs root this user may not read.
fn tracefs_denied() -> Option<std::io::Error> {
    use std::io::{Error, ErrorKind};
    ftrace::tracefs::TRACEFS_ROOTS.iter().find_map(|root| {
        let denied = std::fs::read_dir(root).err()?.kind() == ErrorKind::PermissionDenied;
        denied.then(|| {
            Error::new(
                ErrorKind::PermissionDenied,
                format!("{root}: permission denied (ftrace needs root)"),
            )
        })
    })
}

/// Runs the daemon until SIGINT/SIGTERM. Returns the exit status.
pub fn run(opts: ProducerOptions) -> i32 {
    // A previous run that died while tracing left its state file behind.
    if opts.state_file.exists() {
        if let Ok(root) = Tracefs::discover() {
            let cleaned = ftrace::crash_state::cleanup(&opts.state_file, &root);
            let names: Vec<String> = cleaned
                .iter()
                .map(|t| match t {
                    ftrace::crash_state::Touched::Root => "the top-level buffer".to_owned(),
                    ftrace::crash_state::Touched::Instance { name, .. } => {
                        format!("instance {name}")
                    }
                    ftrace::crash_state::Touched::Kprobe { group, event } => {
                        format!("kprobe {group}/{event}")
                    }
                })
                .collect();
            crate::log_warn!(
                "cleaned ftrace state left by a previous run: {}",
                names.join(", ")
            );
        }
    }
    let mut el = match EventLoop::new() {
        Ok(el) => el,
        Err(e) => {
            crate::log_error!("event loop: {e}");
            return 1;
        }
    };
    let probes = Probes::new(ftrace::mux::FtraceMux::new(opts.state_file.clone()));
    let mut producer = Producer::new(probes, opts.socket, opts.exit_with_traced);
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

//! traced_probes' part of the shared [`Producer`]: its five data sources,
//! the ftrace mux they share and the drain timer that feeds process_stats.

use std::time::Duration;

use crate::base::event_loop::{TaskRunner, TimerId};
use crate::pb::protos::DataSourceConfig;
use crate::traced_probes::data_source::{self, DataSource, Env};
use crate::traced_probes::factory;
use crate::traced_probes::ftrace::mux::FtraceMux;
use crate::traced_probes::ftrace::reading::NOTIFY_COALESCE;
use crate::traced_probes::producer::{Ctl, Daemon, Instances, Producer};
use crate::traced_probes::wire;
use crate::tracing::core::trace_writer::TraceWriter;

/// Env var naming the fd to write "1" to once registered with traced.
pub const NOTIFY_ENV: &str = "TRACED_PROBES_NOTIFY_FD";

pub struct Probes {
    ftrace: FtraceMux,
    ftrace_timer: Option<TimerId>,
    /// The ftrace readers can wake the loop (a posted message).
    ftrace_notify_set: bool,
}

pub type ProbesProducer = Producer<Probes>;

impl Probes {
    pub fn new(ftrace: FtraceMux) -> Probes {
        Probes {
            ftrace,
            ftrace_timer: None,
            ftrace_notify_set: false,
        }
    }

    fn env(&mut self) -> Env<'_> {
        Env {
            ftrace: &mut self.ftrace,
        }
    }

    /// Hands pids seen by ftrace to process_stats of the same session.
    fn dispatch_pids(&mut self, instances: &mut Instances<Box<dyn DataSource>>) {
        for (session, pids) in self.ftrace.take_pids() {
            for inst in instances.values_mut() {
                if inst.started
                    && inst.session == session
                    && inst.name == data_source::PROCESS_STATS
                {
                    inst.ds.on_pids(&pids);
                }
            }
        }
    }
}

impl Daemon for Probes {
    type Source = Box<dyn DataSource>;
    const NOTIFY_ENV: &'static str = NOTIFY_ENV;
    const PRODUCER_NAME: &'static str = wire::PRODUCER_NAME;

    fn data_sources(&self) -> &'static [&'static str] {
        &data_source::ALL
    }

    fn setup(
        &mut self,
        id: u64,
        config: &DataSourceConfig,
        writer: TraceWriter,
    ) -> Result<Self::Source, String> {
        factory::create(id, config, writer, &mut self.env())
    }

    fn start(&mut self, ds: &mut Self::Source) -> Option<Duration> {
        ds.start(&mut self.env())
    }

    fn tick(&mut self, ds: &mut Self::Source) -> Option<Duration> {
        ds.tick(&mut self.env())
    }

    fn stop(&mut self, ds: &mut Self::Source) {
        ds.stop(&mut self.env())
    }

    fn clear_incremental_state(&mut self, ds: &mut Self::Source) {
        ds.clear_incremental_state(&mut self.env())
    }

    fn after_stop(&mut self) {
        self.ftrace.release_stopped();
    }

    fn setup_problems(&mut self, ds: &mut Self::Source) -> Vec<String> {
        ds.setup_problems(&self.env())
    }

    fn flush(&mut self, instances: &mut Instances<Self::Source>, ids: &[u64], stopping: bool) {
        if stopping {
            // Their kernel buffers can be stopped and read to the end.
            self.ftrace.mark_stopping(ids);
        }
        // ftrace first: what it drains now may name pids that process_stats
        // must describe before it flushes in turn.
        for pass_ftrace in [true, false] {
            for id in ids {
                if let Some(inst) = instances.get_mut(id) {
                    if (inst.name == data_source::FTRACE) == pass_ftrace {
                        inst.ds.flush(&mut self.env());
                    }
                }
            }
            if pass_ftrace {
                self.dispatch_pids(instances);
            }
        }
    }

    fn on_wake(&mut self, ctl: &mut Ctl<'_>) {
        if !self.ftrace_notify_set {
            // Before any StartDataSource: ftrace workers wake the loop
            // when pages come while the drain timer sleeps long.
            let remote = ctl.remote();
            self.ftrace.set_notify(std::sync::Arc::new(move || {
                let _ = remote.post(());
            }));
            self.ftrace_notify_set = true;
        }
    }

    fn after_start(&mut self, ctl: &mut Ctl<'_>) {
        if self.ftrace_timer.is_none() {
            if let Some(d) = self.ftrace.drain_period() {
                self.ftrace_timer = Some(ctl.add_timer(d));
            }
        }
    }

    /// The ftrace drain timer (the producer holds commits: one CommitData
    /// for the whole drain, not one per chunk).
    fn on_timer(
        &mut self,
        ctl: &mut Ctl<'_>,
        id: TimerId,
        instances: &mut Instances<Self::Source>,
    ) -> bool {
        if Some(id) != self.ftrace_timer {
            return false;
        }
        self.ftrace_timer = None;
        // Zero when data was left behind: back at once (after pending IPC).
        let next = self.ftrace.tick();
        self.dispatch_pids(instances);
        if let Some(d) = next {
            self.ftrace_timer = Some(ctl.add_timer(d));
        }
        true
    }

    /// A worker staged pages while the drain timer slept long: drain in a
    /// moment (see [`NOTIFY_COALESCE`]).
    fn on_message(&mut self, ctl: &mut Ctl<'_>, _instances: &mut Instances<Self::Source>) {
        if let Some(t) = self.ftrace_timer.take() {
            ctl.cancel_timer(t);
            self.ftrace_timer = Some(ctl.add_timer(NOTIFY_COALESCE));
        }
    }

    fn teardown(&mut self, ctl: &mut Ctl<'_>) {
        if let Some(t) = self.ftrace_timer.take() {
            ctl.cancel_timer(t);
        }
    }
}

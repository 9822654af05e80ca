//! The service's commands (GetAsyncCommand stream): SMB setup, data source
//! lifecycle, flushes, and the ftrace drain timer that feeds process_stats.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use super::{Instance, Producer};
use crate::base::event_loop::{LoopCtl, TaskRunner};
use crate::base::shm::{AttachOptions, Shm};
use crate::pb::protos::DataSourceConfig;
use crate::traced_probes::data_source::{self, Env};
use crate::traced_probes::factory;
use crate::traced_probes::ftrace::reading::NOTIFY_COALESCE;
use crate::traced_probes::link::Method;
use crate::traced_probes::wire::{self, Command};
use crate::tracing::core::arbiter::{Arbiter, BufferExhaustedPolicy, CommitBatch};
use crate::tracing::core::smb_abi::SmbAbi;

impl Producer {
    pub(super) fn on_command<M>(&mut self, ctl: &mut LoopCtl<'_, M>, payload_untrusted: &[u8]) {
        self.stats.commands += 1;
        let cmd = match wire::parse_command(payload_untrusted) {
            Ok(c) => c,
            Err(e) => {
                self.stats.commands_ignored += 1;
                crate::log_warn!("ignoring async command: {e}");
                return;
            }
        };
        match cmd {
            Command::SetupTracing { page_size_kb } => {
                let fd = self.stashed_fd.take();
                self.setup_tracing(page_size_kb, fd)
            }
            Command::SetupDataSource { id, config } => self.setup_data_source(ctl, id, &config),
            Command::StartDataSource { id, .. } => self.start_data_source(ctl, id),
            Command::StopDataSource { id } => self.stop_data_source(ctl, id),
            Command::Flush {
                ids,
                request_id,
                stopping,
            } => self.flush(&ids, request_id, stopping),
            Command::ClearIncrementalState { ids } => {
                for id in ids {
                    if let Some(i) = self.instances.get_mut(&id) {
                        let mut env = Env {
                            ftrace: &mut self.ftrace,
                        };
                        i.ds.clear_incremental_state(&mut env);
                    }
                }
            }
        }
    }

    fn setup_tracing(&mut self, page_size_kb: u32, fd: Option<OwnedFd>) {
        if self.arbiter.is_some() {
            self.stats.commands_ignored += 1;
            return crate::log_warn!("SetupTracing again on one connection; ignored");
        }
        let shm = match (fd, self.shmem_emulation) {
            // Emulation: a private buffer; chunks leave inline in CommitData.
            (_, true) => match Shm::create(wire::SMB_SIZE_HINT as usize) {
                Ok(s) => s,
                Err(e) => return crate::log_error!("cannot create the emulated buffer: {e}"),
            },
            (Some(fd), false) => match Shm::attach(fd, AttachOptions::default()) {
                Ok(s) => s,
                Err(e) => return crate::log_error!("cannot map the shared memory buffer: {e}"),
            },
            (None, false) => {
                self.stats.commands_ignored += 1;
                return crate::log_error!("SetupTracing without a shared memory fd");
            }
        };
        let page_size = (page_size_kb as usize).saturating_mul(1024);
        let abi = match SmbAbi::new(shm.mem().clone(), page_size) {
            Ok(a) => a,
            Err(e) => return crate::log_error!("unusable shared memory buffer: {e}"),
        };
        if self.shmem_emulation {
            self.link.lock().emulated_smb = Some(abi.clone());
        }
        let arbiter = Arbiter::new(abi, wire::arbiter_config(), Arc::new(self.link.clone()));
        arbiter.set_direct_smb_patching(self.direct_patching);
        self.arbiter = Some(arbiter);
        self.shm = Some(shm);
    }

    fn setup_data_source<M>(
        &mut self,
        ctl: &mut LoopCtl<'_, M>,
        id: u64,
        config: &DataSourceConfig,
    ) {
        let name = config.name.clone().unwrap_or_default();
        let r = (|| {
            if self.instances.contains_key(&id) {
                return Err("instance id already in use".to_string());
            }
            if !data_source::ALL.contains(&name.as_str()) {
                return Err("not one of our data sources".to_string());
            }
            let arbiter = self.arbiter.as_ref().ok_or("no shared memory yet")?;
            let buffer = wire::target_buffer(config).ok_or("bad target_buffer")?;
            let writer = arbiter
                .create_trace_writer(buffer, BufferExhaustedPolicy::Stall)
                .ok_or("out of trace writer ids")?;
            let mut env = Env {
                ftrace: &mut self.ftrace,
            };
            factory::create(id, config, writer, &mut env)
        })();
        match r {
            Ok(ds) => {
                crate::log_info!("setup {name} (instance {id})");
                if let Some(d) = data_source::watchdog_delay(config) {
                    self.watchdogs.insert(ctl.add_timer(d), id);
                }
                self.instances.insert(
                    id,
                    Instance {
                        ds,
                        name,
                        session: data_source::session_of(config),
                        started: false,
                        timer: None,
                    },
                );
            }
            Err(e) => {
                self.stats.setup_failures += 1;
                crate::log_error!("cannot set up {name} (instance {id}): {e}");
            }
        }
    }

    fn start_data_source<M>(&mut self, ctl: &mut LoopCtl<'_, M>, id: u64) {
        let Some(inst) = self.instances.get_mut(&id) else {
            // Setup failed: no ack, as upstream (traced reports it as slow).
            return;
        };
        if inst.started {
            return;
        }
        inst.started = true;
        let mut env = Env {
            ftrace: &mut self.ftrace,
        };
        if let Some(d) = inst.ds.start(&mut env) {
            let t = ctl.add_timer(d);
            inst.timer = Some(t);
            self.timers.insert(t, id);
        }
        let problems = inst.ds.setup_problems(&env);
        self.arm_ftrace_timer(ctl);
        self.link.lock().invoke(
            Method::NotifyDataSourceStarted,
            &wire::notify_started(id, &problems),
            true,
        );
    }

    pub(super) fn stop_data_source<M>(&mut self, ctl: &mut LoopCtl<'_, M>, id: u64) {
        self.watchdogs.retain(|t, inst| {
            let mine = *inst == id;
            if mine {
                ctl.cancel_timer(*t);
            }
            !mine
        });
        if let Some(mut inst) = self.instances.remove(&id) {
            if let Some(t) = inst.timer.take() {
                ctl.cancel_timer(t);
                self.timers.remove(&t);
            }
            let mut env = Env {
                ftrace: &mut self.ftrace,
            };
            inst.ds.stop(&mut env);
            crate::log_info!("stopped {} (instance {id})", inst.name);
            drop(inst); // Drops the writer: UnregisterTraceWriter.
        }
        self.link.lock().invoke(
            Method::NotifyDataSourceStopped,
            &wire::notify_stopped(id),
            true,
        );
    }

    fn flush(&mut self, ids: &[u64], request_id: u64, stopping: bool) {
        if stopping {
            // Their kernel buffers can be stopped and read to the end.
            self.ftrace.mark_stopping(ids);
        }
        // ftrace first: what it drains now may name pids that process_stats
        // must describe before it flushes in turn.
        for pass_ftrace in [true, false] {
            for id in ids {
                if let Some(inst) = self.instances.get_mut(id) {
                    if (inst.name == data_source::FTRACE) == pass_ftrace {
                        let mut env = Env {
                            ftrace: &mut self.ftrace,
                        };
                        inst.ds.flush(&mut env);
                    }
                }
            }
            if pass_ftrace {
                self.dispatch_pids();
            }
        }
        match &self.arbiter {
            Some(a) => a.notify_flush_complete(request_id),
            None => {
                let batch = CommitBatch {
                    flush_request_id: Some(request_id),
                    ..Default::default()
                };
                self.link
                    .lock()
                    .invoke(Method::CommitData, &wire::commit_data(&batch), true);
            }
        }
    }

    pub(super) fn arm_ftrace_timer<M>(&mut self, ctl: &mut LoopCtl<'_, M>) {
        if self.ftrace_timer.is_none() {
            if let Some(d) = self.ftrace.drain_period() {
                self.ftrace_timer = Some(ctl.add_timer(d));
            }
        }
    }

    /// Hands pids seen by ftrace to process_stats of the same session.
    fn dispatch_pids(&mut self) {
        for (session, pids) in self.ftrace.take_pids() {
            for inst in self.instances.values_mut() {
                if inst.started
                    && inst.session == session
                    && inst.name == data_source::PROCESS_STATS
                {
                    inst.ds.on_pids(&pids);
                }
            }
        }
    }

    /// A worker staged pages while the drain timer slept long: drain in a
    /// moment (see [`NOTIFY_COALESCE`]).
    pub(super) fn on_ftrace_data<M>(&mut self, ctl: &mut LoopCtl<'_, M>) {
        if let Some(t) = self.ftrace_timer.take() {
            ctl.cancel_timer(t);
            self.ftrace_timer = Some(ctl.add_timer(NOTIFY_COALESCE));
        }
    }

    pub(super) fn on_ftrace_tick<M>(&mut self, ctl: &mut LoopCtl<'_, M>) {
        self.ftrace_timer = None;
        // One CommitData for the whole drain, not one per chunk.
        let hold = self.arbiter.as_ref().map(|a| a.hold_commits());
        // Zero when data was left behind: back at once (after pending IPC).
        let next = self.ftrace.tick();
        drop(hold);
        self.dispatch_pids();
        if let Some(d) = next {
            self.ftrace_timer = Some(ctl.add_timer(d));
        }
    }
}

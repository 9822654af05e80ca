//! The service's commands (GetAsyncCommand stream): SMB setup and the data
//! source lifecycle, the same for every daemon.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use super::{Ctl, Daemon, Instance, Producer};
use crate::base::event_loop::TaskRunner;
use crate::base::shm::{AttachOptions, Shm};
use crate::pb::protos::DataSourceConfig;
use crate::traced_probes::data_source;
use crate::traced_probes::link::Method;
use crate::traced_probes::wire::{self, Command};
use crate::tracing::core::arbiter::{Arbiter, BufferExhaustedPolicy, CommitBatch};
use crate::tracing::core::smb_abi::SmbAbi;

impl<D: Daemon> Producer<D> {
    pub(super) fn on_command(&mut self, ctl: &mut Ctl<'_>, payload_untrusted: &[u8]) {
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
                        self.daemon.clear_incremental_state(&mut i.ds);
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

    fn setup_data_source(&mut self, ctl: &mut Ctl<'_>, id: u64, config: &DataSourceConfig) {
        let name = config.name.clone().unwrap_or_default();
        let r = (|| {
            if self.instances.contains_key(&id) {
                return Err("instance id already in use".to_string());
            }
            if !self.daemon.data_sources().contains(&name.as_str()) {
                return Err("not one of our data sources".to_string());
            }
            let arbiter = self.arbiter.as_ref().ok_or("no shared memory yet")?;
            let buffer = wire::target_buffer(config).ok_or("bad target_buffer")?;
            let writer = arbiter
                .create_trace_writer(buffer, BufferExhaustedPolicy::Stall)
                .ok_or("out of trace writer ids")?;
            self.daemon.setup(id, config, writer)
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

    fn start_data_source(&mut self, ctl: &mut Ctl<'_>, id: u64) {
        let Some(inst) = self.instances.get_mut(&id) else {
            // Setup failed: no ack, as upstream (traced reports it as slow).
            return;
        };
        if inst.started {
            return;
        }
        inst.started = true;
        if let Some(d) = self.daemon.start(&mut inst.ds) {
            let t = ctl.add_timer(d);
            inst.timer = Some(t);
            self.timers.insert(t, id);
        }
        // After the events are enabled: tests start their load on it.
        crate::log_info!("started {} (instance {id})", inst.name);
        let problems = self.daemon.setup_problems(&mut inst.ds);
        self.daemon.after_start(ctl);
        self.link.lock().invoke(
            Method::NotifyDataSourceStarted,
            &wire::notify_started(id, &problems),
            true,
        );
    }

    pub(super) fn stop_data_source(&mut self, ctl: &mut Ctl<'_>, id: u64) {
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
            let t0 = std::time::Instant::now();
            let hold = self
                .arbiter
                .as_ref()
                .filter(|_| D::BATCH_COMMITS)
                .map(|a| a.hold_commits());
            self.daemon.stop(&mut inst.ds);
            drop(hold);
            crate::log_info!(
                "stopped {} (instance {id}) in {} ms",
                inst.name,
                t0.elapsed().as_millis()
            );
            drop(inst); // Drops the writer: UnregisterTraceWriter.
        }
        self.link.lock().invoke(
            Method::NotifyDataSourceStopped,
            &wire::notify_stopped(id),
            true,
        );
        // After telling traced: restoring tracefs may wait on the kernel.
        self.daemon.after_stop();
    }

    fn flush(&mut self, ids: &[u64], request_id: u64, stopping: bool) {
        self.daemon.flush(&mut self.instances, ids, stopping);
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
}

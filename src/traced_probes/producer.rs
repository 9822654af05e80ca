//! The traced_probes producer: one event-loop handler owning the
//! connection to traced, the SMB arbiter and every data source instance.
//!
//! Connection lifecycle:
//! 1. connect → BindService("ProducerPort");
//! 2. once bound, pipelined (the service handles them in order):
//!    InitializeConnection (hints 2 MiB / 32 KiB, scraping disabled),
//!    GetAsyncCommand (stream kept open), RegisterDataSource × 5, Sync;
//! 3. the Sync reply means "registered": the backoff resets and, the first
//!    time, the ready fd (`TRACED_PROBES_NOTIFY_FD`) gets its "1";
//! 4. commands arrive on the GetAsyncCommand stream (see [`wire::Command`]);
//! 5. when traced goes away every instance is torn down (ftrace restored),
//!    the SMB dropped, and we reconnect after 100 ms, 200 ms, ... 30 s.
//!
//! Never hold the [`Link`] lock while calling data sources or writers: the
//! arbiter takes it to send commits.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::backoff::Backoff;
use super::data_source::{self, DataSource, Env};
use super::ftrace_mux::FtraceMux;
use super::link::{Link, Method};
use super::sources;
use super::stop_signals::StopSignals;
use super::wire::{self, Command};
use crate::base::event_loop::{Handler, Interest, LoopCtl, Ready, TaskRunner, TimerId, Token};
use crate::base::shm::{AttachOptions, Shm};
use crate::base::sock_addr::SockAddr;
use crate::ipc::client::{Client, ClientEvent, ClientReply};
use crate::pb::protos::DataSourceConfig;
use crate::tracing::core::arbiter::{Arbiter, ArbiterConfig, BufferExhaustedPolicy};
use crate::tracing::core::smb_abi::SmbAbi;

/// Env var naming the fd to write "1" to once registered with traced.
pub const NOTIFY_ENV: &str = "TRACED_PROBES_NOTIFY_FD";

/// What the producer is told at construction.
#[derive(Debug, Clone)]
pub struct ProducerOptions {
    /// traced's producer socket (path, `@abstract`, host:port).
    pub socket: String,
    /// Crash state file of the ftrace mux.
    pub state_file: PathBuf,
}

/// Counters, for logs and tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProducerStats {
    pub connections: u64,
    pub commands: u64,
    pub commands_ignored: u64,
    pub setup_failures: u64,
}

struct Instance {
    ds: Box<dyn DataSource>,
    name: String,
    session: u64,
    started: bool,
    timer: Option<TimerId>,
}

#[derive(Debug, Default)]
struct Requests {
    bind: Option<u64>,
    init: Option<u64>,
    async_cmd: Option<u64>,
    sync: Option<u64>,
}

pub struct Producer {
    opts: ProducerOptions,
    link: Link,
    connected: bool,
    requests: Requests,
    backoff: Backoff,
    reconnect_timer: Option<TimerId>,
    notified: bool,
    direct_patching: bool,
    arbiter: Option<Arc<Arbiter>>,
    shm: Option<Shm>,
    instances: BTreeMap<u64, Instance>,
    timers: HashMap<TimerId, u64>,
    ftrace: FtraceMux,
    ftrace_timer: Option<TimerId>,
    signals: Option<(StopSignals, Token)>,
    /// An fd received on the connection, not yet taken by SetupTracing.
    stashed_fd: Option<OwnedFd>,
    pub stats: ProducerStats,
}

impl Producer {
    pub fn new(opts: ProducerOptions) -> Producer {
        let ftrace = FtraceMux::new(opts.state_file.clone());
        Producer {
            opts,
            link: Link::default(),
            connected: false,
            requests: Requests::default(),
            backoff: Backoff::default(),
            reconnect_timer: None,
            notified: false,
            direct_patching: false,
            arbiter: None,
            shm: None,
            instances: BTreeMap::new(),
            timers: HashMap::new(),
            ftrace,
            ftrace_timer: None,
            signals: None,
            stashed_fd: None,
            stats: ProducerStats::default(),
        }
    }

    /// Blocks SIGINT/SIGTERM and reads them from a signalfd on the loop:
    /// they stop every instance (leaving ftrace clean) and quit the loop.
    /// Signals that arrived since `stop_signals::block` are delivered too.
    pub fn watch_stop_signals<M>(&mut self, ctl: &mut LoopCtl<'_, M>) -> std::io::Result<()> {
        let fd = StopSignals::open()?;
        let token = ctl.register(&fd, Interest::READABLE)?;
        self.signals = Some((fd, token));
        Ok(())
    }

    /// Starts the first connection attempt.
    pub fn start<M>(&mut self, ctl: &mut LoopCtl<'_, M>) {
        self.try_connect(ctl);
    }

    fn try_connect<M>(&mut self, ctl: &mut LoopCtl<'_, M>) {
        self.reconnect_timer = None;
        let addr = match SockAddr::parse(&self.opts.socket) {
            Ok(a) => a,
            Err(e) => {
                crate::log_error!("bad producer socket {:?}: {e}", self.opts.socket);
                return self.schedule_reconnect(ctl);
            }
        };
        let client = match Client::connect(ctl, &addr) {
            Ok(c) => c,
            Err(e) => {
                crate::log_debug!("cannot connect to {}: {e}", self.opts.socket);
                return self.schedule_reconnect(ctl);
            }
        };
        let mut link = self.link.lock();
        link.set_client(client);
        self.requests = Requests::default();
        match link.bind() {
            Ok(id) => self.requests.bind = Some(id),
            Err(e) => {
                crate::log_warn!("BindService: {e}");
                link.clear();
                drop(link);
                self.schedule_reconnect(ctl);
            }
        }
    }

    fn schedule_reconnect<M>(&mut self, ctl: &mut LoopCtl<'_, M>) {
        if self.reconnect_timer.is_none() {
            let d = self.backoff.next_delay();
            self.reconnect_timer = Some(ctl.add_timer(d));
        }
    }

    fn on_bound<M>(
        &mut self,
        ctl: &mut LoopCtl<'_, M>,
        service: Option<crate::ipc::client::BoundService>,
    ) {
        let Some(service) = service else {
            crate::log_error!("traced does not expose ProducerPort");
            return self.disconnect(ctl);
        };
        let mut link = self.link.lock();
        link.set_service(service);
        self.requests.init = link.invoke(
            Method::InitializeConnection,
            &wire::initialize_connection(),
            false,
        );
        self.requests.async_cmd = link.invoke(Method::GetAsyncCommand, &[], false);
        for name in data_source::ALL {
            link.invoke(
                Method::RegisterDataSource,
                &wire::register_data_source(name),
                true,
            );
        }
        self.requests.sync = link.invoke(Method::Sync, &[], false);
    }

    fn on_reply<M>(&mut self, ctl: &mut LoopCtl<'_, M>, mut r: ClientReply) {
        let id = Some(r.request_id);
        // Like Perfetto's "TakeReceivedFD": a received fd waits for the
        // handler that wants it (SetupTracing). One recvmsg can carry several
        // frames, so the ipc layer may attach it to an earlier frame.
        if let Some(fd) = r.fd.take() {
            self.stashed_fd = Some(fd);
        }
        if id == self.requests.init {
            if !r.success {
                crate::log_error!("traced refused InitializeConnection");
                return self.disconnect(ctl);
            }
            self.direct_patching = wire::direct_patching_supported(&r.payload);
        } else if id == self.requests.sync {
            self.connected = true;
            self.stats.connections += 1;
            self.backoff.reset();
            crate::log_info!("connected to traced at {}", self.opts.socket);
            if !self.notified {
                self.notified = true;
                crate::base::child_process::notify_ready(NOTIFY_ENV);
            }
        } else if id == self.requests.async_cmd {
            if !r.success {
                crate::log_error!("GetAsyncCommand failed");
                return self.disconnect(ctl);
            }
            self.on_command(ctl, &r.payload);
        }
    }

    fn on_command<M>(&mut self, ctl: &mut LoopCtl<'_, M>, payload_untrusted: &[u8]) {
        self.stats.commands += 1;
        let cmd = match wire::parse_command(payload_untrusted) {
            Ok(c) => c,
            Err(e) => {
                self.stats.commands_ignored += 1;
                crate::log_warn!("ignoring async command: {e:?}");
                return;
            }
        };
        match cmd {
            Command::SetupTracing { page_size_kb } => {
                let fd = self.stashed_fd.take();
                self.setup_tracing(page_size_kb, fd)
            }
            Command::SetupDataSource { id, config } => self.setup_data_source(id, &config),
            Command::StartDataSource { id, .. } => self.start_data_source(ctl, id),
            Command::StopDataSource { id } => self.stop_data_source(ctl, id),
            Command::Flush { ids, request_id } => self.flush(&ids, request_id),
            Command::ClearIncrementalState { ids } => {
                for id in ids {
                    if let Some(i) = self.instances.get_mut(&id) {
                        i.ds.clear_incremental_state();
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
        let Some(fd) = fd else {
            self.stats.commands_ignored += 1;
            return crate::log_error!("SetupTracing without a shared memory fd");
        };
        let shm = match Shm::attach(fd, AttachOptions::default()) {
            Ok(s) => s,
            Err(e) => return crate::log_error!("cannot map the shared memory buffer: {e}"),
        };
        let page_size = (page_size_kb as usize).saturating_mul(1024);
        let abi = match SmbAbi::new(shm.mem().clone(), page_size) {
            Ok(a) => a,
            Err(e) => return crate::log_error!("unusable shared memory buffer: {e:?}"),
        };
        let arbiter = Arbiter::new(abi, ArbiterConfig::default(), Arc::new(self.link.clone()));
        arbiter.set_direct_smb_patching(self.direct_patching);
        self.arbiter = Some(arbiter);
        self.shm = Some(shm);
    }

    fn setup_data_source(&mut self, id: u64, config: &DataSourceConfig) {
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
            sources::create(id, config, writer, &mut env)
        })();
        match r {
            Ok(ds) => {
                crate::log_info!("setup {name} (instance {id})");
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
        self.arm_ftrace_timer(ctl);
        self.link.lock().invoke(
            Method::NotifyDataSourceStarted,
            &wire::notify_started(id),
            true,
        );
    }

    fn stop_data_source<M>(&mut self, ctl: &mut LoopCtl<'_, M>, id: u64) {
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

    fn flush(&mut self, ids: &[u64], request_id: u64) {
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
                let batch = crate::tracing::core::arbiter::CommitBatch {
                    flush_request_id: Some(request_id),
                    ..Default::default()
                };
                self.link
                    .lock()
                    .invoke(Method::CommitData, &wire::commit_data(&batch), true);
            }
        }
    }

    fn arm_ftrace_timer<M>(&mut self, ctl: &mut LoopCtl<'_, M>) {
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

    fn on_ftrace_tick<M>(&mut self, ctl: &mut LoopCtl<'_, M>) {
        self.ftrace_timer = None;
        let more = self.ftrace.tick();
        self.dispatch_pids();
        if let Some(period) = self.ftrace.drain_period() {
            // Data left behind: come back at once (after pending IPC).
            let d = if more { Duration::ZERO } else { period };
            self.ftrace_timer = Some(ctl.add_timer(d));
        }
    }

    /// Stops every instance (ftrace restored) and drops the SMB.
    fn teardown<M>(&mut self, ctl: &mut LoopCtl<'_, M>) {
        let ids: Vec<u64> = self.instances.keys().copied().collect();
        for id in ids {
            if let Some(mut inst) = self.instances.remove(&id) {
                if let Some(t) = inst.timer.take() {
                    ctl.cancel_timer(t);
                }
                let mut env = Env {
                    ftrace: &mut self.ftrace,
                };
                inst.ds.stop(&mut env);
            }
        }
        self.timers.clear();
        if let Some(t) = self.ftrace_timer.take() {
            ctl.cancel_timer(t);
        }
        self.arbiter = None;
        self.shm = None;
        self.stashed_fd = None;
    }

    fn disconnect<M>(&mut self, ctl: &mut LoopCtl<'_, M>) {
        if self.connected {
            crate::log_warn!("lost the connection to traced; reconnecting");
        }
        self.connected = false;
        self.teardown(ctl);
        // Dropping the client closes the socket, which also removes it
        // from epoll.
        self.link.lock().clear();
        self.requests = Requests::default();
        self.schedule_reconnect(ctl);
    }

    /// SIGINT/SIGTERM: stop everything cleanly, then quit the loop.
    pub fn shutdown<M>(&mut self, ctl: &mut LoopCtl<'_, M>) {
        crate::log_info!("stopping");
        let ids: Vec<u64> = self.instances.keys().copied().collect();
        for id in ids {
            self.stop_data_source(ctl, id);
        }
        self.teardown(ctl);
        ctl.quit();
    }

    /// Registered with traced (Sync answered) on the current connection.
    pub fn is_connected(&self) -> bool {
        self.connected
    }
}

impl Handler for Producer {
    type Msg = ();

    fn on_io(&mut self, ctl: &mut LoopCtl<'_, ()>, token: Token, ready: Ready) {
        if let Some((fd, t)) = &mut self.signals {
            if *t == token {
                if fd.take() {
                    self.shutdown(ctl);
                }
                return;
            }
        }
        let mut events = Vec::new();
        {
            let mut link = self.link.lock();
            if link.token() != Some(token) {
                return;
            }
            link.on_io(ctl, ready, &mut events);
        }
        for ev in events {
            match ev {
                ClientEvent::Bound {
                    request_id,
                    service,
                } if Some(request_id) == self.requests.bind => self.on_bound(ctl, service),
                ClientEvent::Reply(r) => self.on_reply(ctl, r),
                ClientEvent::RequestError { error, .. } => {
                    crate::log_warn!("traced rejected a request: {error}");
                }
                ClientEvent::Disconnected => return self.disconnect(ctl),
                ClientEvent::Bound { .. } => {}
            }
        }
    }

    fn on_timer(&mut self, ctl: &mut LoopCtl<'_, ()>, id: TimerId) {
        if Some(id) == self.reconnect_timer {
            return self.try_connect(ctl);
        }
        if Some(id) == self.ftrace_timer {
            return self.on_ftrace_tick(ctl);
        }
        let Some(inst_id) = self.timers.remove(&id) else {
            return;
        };
        let Some(inst) = self.instances.get_mut(&inst_id) else {
            return;
        };
        inst.timer = None;
        let mut env = Env {
            ftrace: &mut self.ftrace,
        };
        if let Some(d) = inst.ds.tick(&mut env) {
            let t = ctl.add_timer(d);
            inst.timer = Some(t);
            self.timers.insert(t, inst_id);
        }
    }
}

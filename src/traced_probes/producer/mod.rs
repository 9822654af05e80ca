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

mod commands;

use std::collections::{BTreeMap, HashMap};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use crate::base::event_loop::{Handler, Interest, LoopCtl, Ready, TaskRunner, TimerId, Token};
use crate::base::shm::Shm;
use crate::base::sock_addr::SockAddr;
use crate::ipc::client::{Client, ClientEvent, ClientReply};
use crate::traced_probes::backoff::Backoff;
use crate::traced_probes::data_source::{self, DataSource, Env};
use crate::traced_probes::ftrace::mux::FtraceMux;
use crate::traced_probes::link::{Link, Method};
use crate::traced_probes::stop_signals::StopSignals;
use crate::traced_probes::wire;
use crate::tracing::core::arbiter::Arbiter;

/// Env var naming the fd to write "1" to once registered with traced.
pub const NOTIFY_ENV: &str = "TRACED_PROBES_NOTIFY_FD";

/// What the producer is told at construction.
#[derive(Debug, Clone)]
pub struct ProducerOptions {
    /// traced's producer socket (path, `@abstract`, host:port).
    pub socket: String,
    /// Crash state file of the ftrace mux.
    pub state_file: PathBuf,
    /// Exit (after the teardown) when a registered connection closes,
    /// instead of reconnecting: traced_probes started with an autostarted
    /// traced goes away with it.
    pub exit_with_traced: bool,
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
    /// traced asked for chunks inline in CommitData (we are relayed).
    shmem_emulation: bool,
    arbiter: Option<Arc<Arbiter>>,
    shm: Option<Shm>,
    instances: BTreeMap<u64, Instance>,
    timers: HashMap<TimerId, u64>,
    /// Watchdog timer → instance (see `data_source::watchdog_delay`).
    watchdogs: HashMap<TimerId, u64>,
    ftrace: FtraceMux,
    ftrace_timer: Option<TimerId>,
    /// The ftrace readers can wake the loop (a posted message).
    ftrace_notify_set: bool,
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
            shmem_emulation: false,
            arbiter: None,
            shm: None,
            instances: BTreeMap::new(),
            timers: HashMap::new(),
            watchdogs: HashMap::new(),
            ftrace,
            ftrace_timer: None,
            ftrace_notify_set: false,
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
                if e.kind() == std::io::ErrorKind::PermissionDenied {
                    crate::log_warn!("{e}");
                } else {
                    crate::log_debug!("cannot connect to {}: {e}", self.opts.socket);
                }
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
            self.shmem_emulation = wire::shmem_emulation(&r.payload);
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
        self.ftrace.release_stopped();
        self.timers.clear();
        for (t, _) in self.watchdogs.drain() {
            ctl.cancel_timer(t);
        }
        if let Some(t) = self.ftrace_timer.take() {
            ctl.cancel_timer(t);
        }
        self.arbiter = None;
        self.shm = None;
        self.stashed_fd = None;
        self.shmem_emulation = false;
        self.link.lock().emulated_smb = None;
    }

    fn disconnect<M>(&mut self, ctl: &mut LoopCtl<'_, M>) {
        if self.connected && self.opts.exit_with_traced {
            crate::log_info!("traced went away; exiting with it");
            self.connected = false;
            self.teardown(ctl);
            self.link.lock().clear();
            return ctl.quit();
        }
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

    /// A SIGINT/SIGTERM is waiting on the signalfd (it is consumed).
    fn stop_signal_pending(&mut self) -> bool {
        self.signals.as_mut().is_some_and(|(fd, _)| fd.take())
    }

    /// Registered with traced (Sync answered) on the current connection.
    pub fn is_connected(&self) -> bool {
        self.connected
    }
}

impl Handler for Producer {
    type Msg = ();

    fn on_io(&mut self, ctl: &mut LoopCtl<'_, ()>, token: Token, ready: Ready) {
        if !self.ftrace_notify_set {
            // Before any StartDataSource: ftrace workers wake the loop
            // when pages come while the drain timer sleeps long.
            let remote = ctl.remote();
            self.ftrace.set_notify(std::sync::Arc::new(move || {
                let _ = remote.post(());
            }));
            self.ftrace_notify_set = true;
        }
        if let Some((fd, t)) = &mut self.signals {
            if *t == token {
                if fd.take() {
                    self.shutdown(ctl);
                }
                return;
            }
        }
        let Some(events) = self.link.events_for(ctl, token, ready) else {
            return;
        };
        for ev in events {
            // One read may bring hundreds of commands (a config of many
            // data sources), each setup taking milliseconds: a stop
            // signal is honoured between them, not after the batch.
            if self.stop_signal_pending() {
                return self.shutdown(ctl);
            }
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

    fn on_message(&mut self, ctl: &mut LoopCtl<'_, ()>, _msg: ()) {
        self.on_ftrace_data(ctl);
    }

    fn on_timer(&mut self, ctl: &mut LoopCtl<'_, ()>, id: TimerId) {
        if Some(id) == self.reconnect_timer {
            return self.try_connect(ctl);
        }
        if Some(id) == self.ftrace_timer {
            return self.on_ftrace_tick(ctl);
        }
        if let Some(inst_id) = self.watchdogs.remove(&id) {
            crate::log_error!("traced never stopped instance {inst_id}; stopping it");
            return self.stop_data_source(ctl, inst_id);
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

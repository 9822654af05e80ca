//! The producer both daemons run (traced_probes and traced_perf): one
//! event-loop handler owning the connection to traced, the SMB arbiter and
//! every data source instance. What differs between the daemons (their data
//! sources, their own timers) is a [`Daemon`].
//!
//! Connection lifecycle:
//! 1. connect → BindService("ProducerPort");
//! 2. once bound, pipelined (the service handles them in order):
//!    InitializeConnection (hints 2 MiB / 32 KiB, scraping disabled),
//!    GetAsyncCommand (stream kept open), RegisterDataSource per source, Sync;
//! 3. the Sync reply means "registered": the backoff resets and, the first
//!    time, the daemon's ready fd gets its "1";
//! 4. commands arrive on the GetAsyncCommand stream (see [`wire::Command`]);
//! 5. when traced goes away every instance is torn down (ftrace restored),
//!    the SMB dropped, and we reconnect after 100 ms, 200 ms, ... 30 s.
//!
//! Never hold the [`Link`] lock while calling data sources or writers: the
//! arbiter takes it to send commits.

mod commands;

use crate::mem::small_map::SmallMap;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use crate::base::event_loop::{Handler, Interest, LoopCtl, Ready, TaskRunner, TimerId, Token};
use crate::base::shm::Shm;
use crate::base::sock_addr::SockAddr;
use crate::ipc::client::{Client, ClientEvent, ClientReply};
use crate::pb::protos::DataSourceConfig;
use crate::traced_probes::backoff::Backoff;
use crate::traced_probes::link::{Link, Method};
use crate::traced_probes::stop_signals::StopSignals;
use crate::traced_probes::wire;
use crate::tracing::core::arbiter::Arbiter;
use crate::tracing::core::trace_writer::TraceWriter;

/// The loop both daemons run on (the ftrace workers post `()` to wake it).
pub type Ctl<'a> = LoopCtl<'a, ()>;

/// One daemon's part: the data sources it serves and its own timers.
pub trait Daemon {
    type Source;
    /// Env var naming the fd to write "1" to once registered with traced.
    const NOTIFY_ENV: &'static str;
    /// Our name in InitializeConnection.
    const PRODUCER_NAME: &'static str;
    /// Ticks and stops send one CommitData for all they wrote.
    const BATCH_COMMITS: bool = false;
    fn data_sources(&self) -> &'static [&'static str];
    fn setup(
        &mut self,
        id: u64,
        config: &DataSourceConfig,
        writer: TraceWriter,
    ) -> Result<Self::Source, String>;
    fn start(&mut self, ds: &mut Self::Source) -> Option<Duration>;
    fn tick(&mut self, ds: &mut Self::Source) -> Option<Duration>;
    /// Last call before the instance is dropped.
    fn stop(&mut self, ds: &mut Self::Source);
    fn clear_incremental_state(&mut self, ds: &mut Self::Source);
    /// What setup could not give as asked (unknown events, an instance
    /// another process owns), told to traced when the instance starts.
    fn setup_problems(&mut self, _ds: &mut Self::Source) -> Vec<String> {
        Vec::new()
    }
    /// Flushes the instances of `ids` that exist (in the daemon's order).
    fn flush(&mut self, instances: &mut Instances<Self::Source>, ids: &[u64], stopping: bool);
    /// Called on every loop wake-up before anything else.
    fn on_wake(&mut self, _ctl: &mut Ctl<'_>) {}
    /// After an instance started.
    fn after_start(&mut self, _ctl: &mut Ctl<'_>) {}
    /// After traced was told instances stopped: slow restores (tracefs
    /// waits on the kernel) go here, so the acknowledgement is not late.
    fn after_stop(&mut self) {}
    /// A timer the producer does not own (commits held while it runs);
    /// true when it was the daemon's.
    fn on_timer(
        &mut self,
        _ctl: &mut Ctl<'_>,
        _id: TimerId,
        _instances: &mut Instances<Self::Source>,
    ) -> bool {
        false
    }
    fn on_message(&mut self, _ctl: &mut Ctl<'_>, _instances: &mut Instances<Self::Source>) {}
    /// The connection's instances are gone: drop the daemon's timers.
    fn teardown(&mut self, _ctl: &mut Ctl<'_>) {}
}

pub type Instances<S> = SmallMap<u64, Instance<S>>;

/// Counters, for logs and tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProducerStats {
    pub connections: u64,
    pub commands: u64,
    pub commands_ignored: u64,
    pub setup_failures: u64,
}

pub struct Instance<S> {
    pub ds: S,
    pub name: String,
    pub session: u64,
    pub started: bool,
    timer: Option<TimerId>,
}

#[derive(Debug, Default)]
struct Requests {
    bind: Option<u64>,
    init: Option<u64>,
    async_cmd: Option<u64>,
    sync: Option<u64>,
}

pub struct Producer<D: Daemon> {
    daemon: D,
    /// traced's producer socket (path, `@abstract`, host:port).
    socket: String,
    /// Exit (after the teardown) when a registered connection closes,
    /// instead of reconnecting: a daemon started with an autostarted
    /// traced goes away with it.
    exit_with_traced: bool,
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
    instances: Instances<D::Source>,
    timers: HashMap<TimerId, u64>,
    /// Watchdog timer → instance (see `data_source::watchdog_delay`).
    watchdogs: HashMap<TimerId, u64>,
    signals: Option<(StopSignals, Token)>,
    /// An fd received on the connection, not yet taken by SetupTracing.
    stashed_fd: Option<OwnedFd>,
    pub stats: ProducerStats,
}

impl<D: Daemon> Producer<D> {
    pub fn new(daemon: D, socket: String, exit_with_traced: bool) -> Producer<D> {
        Producer {
            daemon,
            socket,
            exit_with_traced,
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
            instances: SmallMap::new(),
            timers: HashMap::new(),
            watchdogs: HashMap::new(),
            signals: None,
            stashed_fd: None,
            stats: ProducerStats::default(),
        }
    }

    /// Blocks SIGINT/SIGTERM and reads them from a signalfd on the loop:
    /// they stop every instance (leaving ftrace clean) and quit the loop.
    /// Signals that arrived since `stop_signals::block` are delivered too.
    pub fn watch_stop_signals(&mut self, ctl: &mut Ctl<'_>) -> std::io::Result<()> {
        let fd = StopSignals::open()?;
        let token = ctl.register(&fd, Interest::READABLE)?;
        self.signals = Some((fd, token));
        Ok(())
    }

    /// Starts the first connection attempt.
    pub fn start(&mut self, ctl: &mut Ctl<'_>) {
        self.try_connect(ctl);
    }

    fn try_connect(&mut self, ctl: &mut Ctl<'_>) {
        self.reconnect_timer = None;
        let addr = match SockAddr::parse(&self.socket) {
            Ok(a) => a,
            Err(e) => {
                crate::log_error!("bad producer socket {:?}: {e}", self.socket);
                return self.schedule_reconnect(ctl);
            }
        };
        let client = match Client::connect(ctl, &addr) {
            Ok(c) => c,
            Err(e) => {
                if e.kind() == std::io::ErrorKind::PermissionDenied {
                    crate::log_warn!("{e}");
                } else {
                    crate::log_debug!("cannot connect to {}: {e}", self.socket);
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

    fn schedule_reconnect(&mut self, ctl: &mut Ctl<'_>) {
        if self.reconnect_timer.is_none() {
            let d = self.backoff.next_delay();
            self.reconnect_timer = Some(ctl.add_timer(d));
        }
    }

    fn on_bound(&mut self, ctl: &mut Ctl<'_>, service: Option<crate::ipc::client::BoundService>) {
        let Some(service) = service else {
            crate::log_error!("traced does not expose ProducerPort");
            return self.disconnect(ctl);
        };
        let mut link = self.link.lock();
        link.set_service(service);
        self.requests.init = link.invoke(
            Method::InitializeConnection,
            &wire::initialize_connection(D::PRODUCER_NAME),
            false,
        );
        self.requests.async_cmd = link.invoke(Method::GetAsyncCommand, &[], false);
        for name in self.daemon.data_sources() {
            link.invoke(
                Method::RegisterDataSource,
                &wire::register_data_source(name),
                true,
            );
        }
        self.requests.sync = link.invoke(Method::Sync, &[], false);
    }

    fn on_reply(&mut self, ctl: &mut Ctl<'_>, mut r: ClientReply) {
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
            crate::log_info!("connected to traced at {}", self.socket);
            if !self.notified {
                self.notified = true;
                crate::base::child_process::notify_ready(D::NOTIFY_ENV);
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
    fn teardown(&mut self, ctl: &mut Ctl<'_>) {
        for (_, mut inst) in std::mem::take(&mut self.instances) {
            if let Some(t) = inst.timer.take() {
                ctl.cancel_timer(t);
            }
            self.daemon.stop(&mut inst.ds);
        }
        self.daemon.after_stop();
        self.timers.clear();
        for (t, _) in self.watchdogs.drain() {
            ctl.cancel_timer(t);
        }
        self.daemon.teardown(ctl);
        self.arbiter = None;
        self.shm = None;
        self.stashed_fd = None;
        self.shmem_emulation = false;
        self.link.lock().emulated_smb = None;
    }

    fn disconnect(&mut self, ctl: &mut Ctl<'_>) {
        if self.connected && self.exit_with_traced {
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
    pub fn shutdown(&mut self, ctl: &mut Ctl<'_>) {
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

impl<D: Daemon> Handler for Producer<D> {
    type Msg = ();

    fn on_io(&mut self, ctl: &mut Ctl<'_>, token: Token, ready: Ready) {
        self.daemon.on_wake(ctl);
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

    fn on_message(&mut self, ctl: &mut Ctl<'_>, _msg: ()) {
        self.daemon.on_message(ctl, &mut self.instances);
    }

    fn on_timer(&mut self, ctl: &mut Ctl<'_>, id: TimerId) {
        if Some(id) == self.reconnect_timer {
            return self.try_connect(ctl);
        }
        if let Some(inst_id) = self.watchdogs.remove(&id) {
            crate::log_error!("traced never stopped instance {inst_id}; stopping it");
            return self.stop_data_source(ctl, inst_id);
        }
        let Some(inst_id) = self.timers.remove(&id) else {
            let hold = self.arbiter.as_ref().map(|a| a.hold_commits());
            self.daemon.on_timer(ctl, id, &mut self.instances);
            drop(hold);
            return;
        };
        let Some(inst) = self.instances.get_mut(&inst_id) else {
            return;
        };
        inst.timer = None;
        let hold = self
            .arbiter
            .as_ref()
            .filter(|_| D::BATCH_COMMITS)
            .map(|a| a.hold_commits());
        let next = self.daemon.tick(&mut inst.ds);
        drop(hold);
        if let Some(d) = next {
            let t = ctl.add_timer(d);
            inst.timer = Some(t);
            self.timers.insert(t, inst_id);
        }
    }
}

//! traced_perf's producer: connects to traced's producer socket as
//! `perfetto.traced_perf`, registers `linux.perf`, and runs one
//! [`PerfSource`] per instance. The connection machinery (Link, wire
//! messages, SMB arbiter, backoff) is traced_probes'; the lifecycle is
//! the same: handshake, then commands on the GetAsyncCommand stream,
//! teardown and reconnect when traced goes away.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::OwnedFd;
use std::sync::Arc;

use super::data_source::PerfSource;
use crate::base::event_loop::{Handler, Interest, LoopCtl, Ready, TaskRunner, TimerId, Token};
use crate::base::shm::{AttachOptions, Shm};
use crate::base::sock_addr::SockAddr;
use crate::ipc::client::{Client, ClientEvent, ClientReply};
use crate::pb::protos::mod_InitializeConnectionRequest::ProducerSMBScrapingMode;
use crate::pb::protos::{DataSourceConfig, InitializeConnectionRequest};
use crate::traced_probes::backoff::Backoff;
use crate::traced_probes::data_source::watchdog_delay;
use crate::traced_probes::link::{Link, Method};
use crate::traced_probes::stop_signals::StopSignals;
use crate::traced_probes::wire::{self, Command};
use crate::tracing::core::arbiter::{Arbiter, BufferExhaustedPolicy, CommitBatch};
use crate::tracing::core::smb_abi::SmbAbi;

pub const NOTIFY_ENV: &str = "TRACED_PERF_NOTIFY_FD";
pub const PRODUCER_NAME: &str = "perfetto.traced_perf";
pub const DATA_SOURCE: &str = "linux.perf";

struct Instance {
    ds: PerfSource,
    started: bool,
    timer: Option<TimerId>,
    watchdog: Option<TimerId>,
}

#[derive(Default)]
struct Requests {
    bind: Option<u64>,
    init: Option<u64>,
    async_cmd: Option<u64>,
    sync: Option<u64>,
}

pub struct Producer {
    socket: String,
    /// Autostarted: leave when traced does instead of reconnecting.
    exit_with_traced: bool,
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
    signals: Option<(StopSignals, Token)>,
    stashed_fd: Option<OwnedFd>,
}

fn initialize_connection() -> Vec<u8> {
    wire::encode(&InitializeConnectionRequest {
        shared_memory_page_size_hint_bytes: Some(wire::SMB_PAGE_SIZE_HINT),
        shared_memory_size_hint_bytes: Some(wire::SMB_SIZE_HINT),
        producer_name: Some(PRODUCER_NAME.to_string()),
        smb_scraping_mode: Some(ProducerSMBScrapingMode::SMB_SCRAPING_DISABLED),
        sdk_version: Some(crate::VERSION.to_string()),
        ..Default::default()
    })
}

impl Producer {
    pub fn new(socket: String, exit_with_traced: bool) -> Producer {
        Producer {
            socket,
            exit_with_traced,
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
            signals: None,
            stashed_fd: None,
        }
    }

    pub fn watch_stop_signals<M>(&mut self, ctl: &mut LoopCtl<'_, M>) -> std::io::Result<()> {
        let fd = StopSignals::open()?;
        let token = ctl.register(&fd, Interest::READABLE)?;
        self.signals = Some((fd, token));
        Ok(())
    }

    pub fn start<M>(&mut self, ctl: &mut LoopCtl<'_, M>) {
        self.reconnect_timer = None;
        let client = SockAddr::parse(&self.socket)
            .map_err(|e| e.to_string())
            .and_then(|a| Client::connect(ctl, &a).map_err(|e| e.to_string()));
        let client = match client {
            Ok(c) => c,
            Err(e) => {
                crate::log_debug!("cannot connect to {}: {e}", self.socket);
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
            self.reconnect_timer = Some(ctl.add_timer(self.backoff.next_delay()));
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
            &initialize_connection(),
            false,
        );
        self.requests.async_cmd = link.invoke(Method::GetAsyncCommand, &[], false);
        link.invoke(
            Method::RegisterDataSource,
            &wire::register_data_source(DATA_SOURCE),
            true,
        );
        self.requests.sync = link.invoke(Method::Sync, &[], false);
    }

    fn on_reply<M>(&mut self, ctl: &mut LoopCtl<'_, M>, mut r: ClientReply) {
        let id = Some(r.request_id);
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
            self.backoff.reset();
            crate::log_info!("connected to traced at {}", self.socket);
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
        let cmd = match wire::parse_command(payload_untrusted) {
            Ok(c) => c,
            Err(e) => return crate::log_warn!("ignoring async command: {e}"),
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
                ids, request_id, ..
            } => self.flush(&ids, request_id),
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
            return crate::log_warn!("SetupTracing again on one connection; ignored");
        }
        let Some(fd) = fd else {
            return crate::log_error!("SetupTracing without a shared memory fd");
        };
        let shm = match Shm::attach(fd, AttachOptions::default()) {
            Ok(s) => s,
            Err(e) => return crate::log_error!("cannot map the shared memory buffer: {e}"),
        };
        let page_size = (page_size_kb as usize).saturating_mul(1024);
        let abi = match SmbAbi::new(shm.mem().clone(), page_size) {
            Ok(a) => a,
            Err(e) => return crate::log_error!("unusable shared memory buffer: {e}"),
        };
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
        let r = (|| {
            if self.instances.contains_key(&id) {
                return Err("instance id already in use".to_string());
            }
            if config.name.as_deref() != Some(DATA_SOURCE) {
                return Err("not linux.perf".to_string());
            }
            let arbiter = self.arbiter.as_ref().ok_or("no shared memory yet")?;
            let buffer = wire::target_buffer(config).ok_or("bad target_buffer")?;
            let writer = arbiter
                .create_trace_writer(buffer, BufferExhaustedPolicy::Stall)
                .ok_or("out of trace writer ids")?;
            let bytes = config.perf_event_config.as_deref().unwrap_or(&[]);
            PerfSource::setup(bytes, writer, config.stop_timeout_ms.unwrap_or(0))
        })();
        match r {
            Ok(ds) => {
                crate::log_info!("setup linux.perf (instance {id})");
                let watchdog = watchdog_delay(config).map(|d| {
                    let t = ctl.add_timer(d);
                    self.timers.insert(t, id);
                    t
                });
                self.instances.insert(
                    id,
                    Instance {
                        ds,
                        started: false,
                        timer: None,
                        watchdog,
                    },
                );
            }
            Err(e) => crate::log_error!("cannot set up linux.perf (instance {id}): {e}"),
        }
    }

    fn start_data_source<M>(&mut self, ctl: &mut LoopCtl<'_, M>, id: u64) {
        let Some(inst) = self.instances.get_mut(&id) else {
            return;
        };
        if inst.started {
            return;
        }
        inst.started = true;
        if let Some(d) = inst.ds.start() {
            let t = ctl.add_timer(d);
            inst.timer = Some(t);
            self.timers.insert(t, id);
        }
        // After the events are enabled: tests start their load on it.
        crate::log_info!("started linux.perf (instance {id})");
        self.link.lock().invoke(
            Method::NotifyDataSourceStarted,
            &wire::notify_started(id, &[]),
            true,
        );
    }

    fn stop_data_source<M>(&mut self, ctl: &mut LoopCtl<'_, M>, id: u64) {
        if let Some(mut inst) = self.instances.remove(&id) {
            for t in [inst.timer.take(), inst.watchdog.take()]
                .into_iter()
                .flatten()
            {
                ctl.cancel_timer(t);
                self.timers.remove(&t);
            }
            let t0 = std::time::Instant::now();
            let hold = self.arbiter.as_ref().map(|a| a.hold_commits());
            inst.ds.stop();
            drop(hold);
            crate::log_info!(
                "stopped linux.perf (instance {id}) in {} ms",
                t0.elapsed().as_millis()
            );
        }
        self.link.lock().invoke(
            Method::NotifyDataSourceStopped,
            &wire::notify_stopped(id),
            true,
        );
    }

    fn flush(&mut self, ids: &[u64], request_id: u64) {
        for id in ids {
            if let Some(inst) = self.instances.get_mut(id) {
                inst.ds.flush();
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

    fn teardown<M>(&mut self, ctl: &mut LoopCtl<'_, M>) {
        for (_, mut inst) in std::mem::take(&mut self.instances) {
            inst.ds.stop();
        }
        for (t, _) in self.timers.drain() {
            ctl.cancel_timer(t);
        }
        self.arbiter = None;
        self.shm = None;
        self.stashed_fd = None;
    }

    fn disconnect<M>(&mut self, ctl: &mut LoopCtl<'_, M>) {
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
        self.link.lock().clear();
        self.requests = Requests::default();
        self.schedule_reconnect(ctl);
    }

    fn shutdown<M>(&mut self, ctl: &mut LoopCtl<'_, M>) {
        crate::log_info!("stopping");
        let ids: Vec<u64> = self.instances.keys().copied().collect();
        for id in ids {
            self.stop_data_source(ctl, id);
        }
        self.teardown(ctl);
        ctl.quit();
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
        let Some(events) = self.link.events_for(ctl, token, ready) else {
            return;
        };
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
            return self.start(ctl);
        }
        let Some(inst_id) = self.timers.remove(&id) else {
            return;
        };
        let Some(inst) = self.instances.get_mut(&inst_id) else {
            return;
        };
        if inst.watchdog == Some(id) {
            crate::log_error!("traced never stopped instance {inst_id}; stopping it");
            return self.stop_data_source(ctl, inst_id);
        }
        inst.timer = None;
        let hold = self.arbiter.as_ref().map(|a| a.hold_commits());
        let next = inst.ds.tick();
        drop(hold);
        if let Some(d) = next {
            let t = ctl.add_timer(d);
            inst.timer = Some(t);
            self.timers.insert(t, inst_id);
        }
    }
}

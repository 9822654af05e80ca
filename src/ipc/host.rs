//! The server side of the IPC: listens, accepts, speaks BindService /
//! InvokeMethod, and hands calls to the application's [`Services`].
//!
//! # Shape
//!
//! The [`Host`] owns sockets and per-client state but not the services:
//! the application keeps its service state next to the host in its own
//! [`Handler`] and passes it in on every I/O event. Services answer through
//! a [`ReplySink`], either during the call or later (deferred replies,
//! never-ending streams): a [`ReplyTo`] is plain `Copy` data that can be
//! stored anywhere, and `Host` itself implements [`ReplySink`] so replies
//! can also be sent from timers and messages.
//!
//! ```no_run
//! use tracebox::base::event_loop::*;
//! use tracebox::base::sock_addr::SockAddr;
//! use tracebox::ipc::host::*;
//!
//! struct Echo;
//! impl Services for Echo {
//!     fn invoke(&mut self, call: Call<'_>, out: &mut dyn ReplySink) {
//!         out.reply(&call.reply_to, Reply::ok(call.args));
//!     }
//! }
//!
//! let mut el = EventLoop::<()>::new().unwrap();
//! let mut host = Host::new();
//! host.expose_service("EchoPort", &["Echo"]);
//! host.listen(&mut el.ctl(), &SockAddr::parse("@echo").unwrap()).unwrap();
//! el.run(&mut HostApp { host, services: Echo }).unwrap();
//! ```
//!
//! # Protocol rules implemented here
//!
//! * BindService: service ids 1.. in [`Host::expose_service`] order; method
//!   ids 1..N in the order given; unknown name → `success=false`.
//! * InvokeMethod with an unknown service id or method id 0 / > N →
//!   `success=false` without calling the service. Undecodable `args` are
//!   the service's to reject (reply [`Reply::fail`]).
//! * `drop_reply=true`: [`ReplyTo::drop_reply`] is set and every reply to
//!   it is silently discarded (the invalid-id rejection above is still
//!   sent, as Perfetto does).
//! * Frames of any other type → `RequestError{"unknown request"}`.
//! * An fd received with a frame is passed in [`Call::fd`]; a reply can
//!   carry one fd.
//! * A client whose send queue exceeds the bound is dropped (logged); an
//!   oversized frame from a client drops it too.
//! * On a TCP or vsock connection (a relay forwarding a remote producer) the first
//!   frame must be `SetPeerIdentity`; anything else first, a second
//!   identity or an invalid one drops the connection (counted in
//!   [`HostStats::clients_dropped_identity`], logged). The identity's pid
//!   and uid become the peer's credentials, its machine hint and name the
//!   peer's [`RemoteMachine`]. On UNIX sockets the frame is ignored.
//! * A network connection must identify itself within
//!   [`IDENTITY_DEADLINE`] and its first bytes must be that frame (an
//!   empty or unparsable frame before it drops it too). Network peers are
//!   counted per remote address ([`DEFAULT_MAX_CLIENTS_PER_ADDRESS`]) and
//!   in all ([`DEFAULT_MAX_NETWORK_CLIENTS`]), not in the uid buckets of
//!   local clients, so one address cannot shut others out. TCP links get
//!   keepalive, so a peer that vanished without a word is reaped.
//!
//! [`Handler`]: crate::base::event_loop::Handler

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::base::event_loop::{Handler, Interest, LoopCtl, Ready, TaskRunner, TimerId, Token};
use crate::base::sock_addr::SockAddr;
use crate::base::unix_socket::{PeerCred, UnixListener, UnixStream};
use crate::pb::protos::mod_IPCFrame::mod_BindServiceReply::MethodInfo;
use crate::pb::protos::mod_IPCFrame::{
    BindServiceReply, InvokeMethod, InvokeMethodReply, OneOfmsg, RequestError,
};
use crate::pb::protos::IPCFrame;
use crate::{log_debug, log_info, log_warn};

use super::conn::{Conn, QueueBudget, ReadStatus, Received, SendError, DEFAULT_MAX_QUEUED_BYTES};
use super::frame::put_reply_header;
pub use super::frame::REPLY_HEADER_MAX;
pub use super::service::{
    Call, ClientId, ExposeService, RemoteMachine, Reply, ReplySink, ReplyTo, ServiceId, Services,
};

impl ExposeService for Host {
    fn expose_service(&mut self, name: &str, methods: &[&str]) -> ServiceId {
        Host::expose_service(self, name, methods)
    }
}

/// Counters for diagnostics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Clients accepted so far.
    pub clients_accepted: u64,
    /// Clients dropped because their send queue overflowed.
    pub clients_dropped_slow: u64,
    /// Clients dropped for sending an oversized frame or a socket error.
    pub clients_dropped_bad: u64,
    /// Frames discarded (unparsable), summed over closed clients too.
    pub frames_discarded: u64,
    /// Frames answered with RequestError.
    pub unknown_requests: u64,
    /// Connections closed at once because a client limit was reached.
    pub clients_refused: u64,
    /// TCP and vsock connections dropped for a missing, repeated or invalid
    /// SetPeerIdentity.
    pub clients_dropped_identity: u64,
}

/// Longest machine hint or name accepted in SetPeerIdentity.
pub const MAX_MACHINE_STRING: usize = 256;

/// Default bound on connected clients in all (with traced's consumer
/// limits, kept under the usual 1024 open files with room for files and
/// memfds).
pub const DEFAULT_MAX_CLIENTS: usize = 640;
/// Bytes queued by all of a host's clients together (each has its own
/// bound too, [`super::conn::DEFAULT_MAX_QUEUED_BYTES`] unless set).
pub const DEFAULT_MAX_TOTAL_QUEUED_BYTES: usize = 64 << 20;
/// Default bound on connected clients of one uid.
pub const DEFAULT_MAX_CLIENTS_PER_UID: usize = 320;
/// Default bound on TCP and vsock connections in all (leaving room in
/// [`DEFAULT_MAX_CLIENTS`] for local clients)...
pub const DEFAULT_MAX_NETWORK_CLIENTS: usize = 384;
/// ...and from one remote address (a relay opens one per producer of its
/// machine, plus its own).
pub const DEFAULT_MAX_CLIENTS_PER_ADDRESS: usize = 128;
/// How long a network connection may take to send SetPeerIdentity.
pub const IDENTITY_DEADLINE: Duration = Duration::from_secs(5);
/// TCP keepalive of network connections: probes after this much silence,
/// every [`KEEPALIVE_INTERVAL`], [`KEEPALIVE_PROBES`] of them: a dead
/// half-open link is closed about a minute after it went quiet.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
pub const KEEPALIVE_PROBES: u32 = 3;

#[derive(Debug)]
struct ServiceDesc {
    name: String,
    methods: Vec<String>,
}

#[derive(Debug)]
struct Client {
    id: ClientId,
    /// As accepted (keys the per-uid count).
    cred: PeerCred,
    /// TCP and vsock: no frame but SetPeerIdentity until `identity` is set.
    tcp: bool,
    /// What a network peer's SetPeerIdentity said.
    identity: Option<(PeerCred, RemoteMachine)>,
    /// A network peer's address (keys the per-address count).
    remote_host: Option<String>,
    /// A network peer not yet identified: when it must have.
    identity_deadline: Option<Instant>,
    conn: Conn,
    /// Set when dropped from inside a reply; reaped on the next event.
    dead: bool,
}

/// Live connections; the [`ReplySink`] handed to services.
#[derive(Debug, Default)]
struct Clients {
    by_token: HashMap<Token, Client>,
    by_id: HashMap<ClientId, Token>,
    /// Killed but not yet reaped.
    dead: Vec<Token>,
    stats: HostStats,
}

/// The IPC host. See the module docs.
#[derive(Debug)]
pub struct Host {
    listeners: Vec<(UnixListener, Token)>,
    services: Vec<ServiceDesc>,
    clients: Clients,
    next_client: u64,
    max_queued: usize,
    /// Shared by every client's queue.
    queue_budget: Arc<QueueBudget>,
    max_clients: usize,
    max_clients_per_uid: usize,
    clients_per_uid: HashMap<u32, usize>,
    max_network_clients: usize,
    max_clients_per_address: usize,
    clients_per_address: HashMap<String, usize>,
    network_clients: usize,
    /// Armed while some network peer has not identified itself.
    identity_timer: Option<TimerId>,
}

impl Default for Host {
    fn default() -> Self {
        Self::new()
    }
}

impl Host {
    /// A host with no listeners or services.
    pub fn new() -> Self {
        Host {
            listeners: Vec::new(),
            services: Vec::new(),
            clients: Clients::default(),
            next_client: 0,
            max_queued: DEFAULT_MAX_QUEUED_BYTES,
            queue_budget: QueueBudget::new(DEFAULT_MAX_TOTAL_QUEUED_BYTES),
            max_clients: DEFAULT_MAX_CLIENTS,
            max_clients_per_uid: DEFAULT_MAX_CLIENTS_PER_UID,
            clients_per_uid: HashMap::new(),
            max_network_clients: DEFAULT_MAX_NETWORK_CLIENTS,
            max_clients_per_address: DEFAULT_MAX_CLIENTS_PER_ADDRESS,
            clients_per_address: HashMap::new(),
            network_clients: 0,
            identity_timer: None,
        }
    }

    /// Bounds on TCP and vsock connections, in all and per remote address.
    pub fn set_network_client_limits(&mut self, total: usize, per_address: usize) {
        self.max_network_clients = total;
        self.max_clients_per_address = per_address;
    }

    /// Bounds on connected clients, in all and per uid; a connection over
    /// either is closed right after accept (and logged).
    pub fn set_client_limits(&mut self, total: usize, per_uid: usize) {
        self.max_clients = total;
        self.max_clients_per_uid = per_uid;
    }

    /// Bound on bytes queued per client before it is dropped.
    pub fn set_max_queued_bytes(&mut self, bytes: usize) {
        self.max_queued = bytes;
    }

    /// Bound on bytes queued by all clients together: a client whose reply
    /// does not fit is dropped as one that does not read. Set it before
    /// clients connect.
    pub fn set_max_total_queued_bytes(&mut self, bytes: usize) {
        self.queue_budget = QueueBudget::new(bytes);
    }

    /// Bytes queued by all clients now.
    pub fn total_queued_bytes(&self) -> usize {
        self.queue_budget.used()
    }

    /// Exposes a service; `methods` are numbered 1..N in this order.
    pub fn expose_service(&mut self, name: &str, methods: &[&str]) -> ServiceId {
        self.services.push(ServiceDesc {
            name: name.to_string(),
            methods: methods.iter().map(|m| m.to_string()).collect(),
        });
        ServiceId(self.services.len() as u32)
    }

    /// Binds `addr` and starts accepting on it.
    pub fn listen<M>(&mut self, ctl: &mut LoopCtl<'_, M>, addr: &SockAddr) -> io::Result<()> {
        let listener = UnixListener::bind(addr)?;
        self.add_listener(ctl, listener)
    }

    /// Accepts on an existing listener (e.g. adopted from Android init).
    pub fn add_listener<M>(
        &mut self,
        ctl: &mut LoopCtl<'_, M>,
        listener: UnixListener,
    ) -> io::Result<()> {
        let token = ctl.register(&listener, Interest::READABLE)?;
        self.listeners.push((listener, token));
        Ok(())
    }

    /// Stops accepting: a path socket's file is unlinked first (so nobody
    /// reaches a closing listener by name), then every listener closes;
    /// connections still in their backlog are refused.
    pub fn close_listeners<M>(&mut self, ctl: &mut LoopCtl<'_, M>) {
        for (listener, _) in self.listeners.drain(..) {
            if let Some(SockAddr::Path(p)) = listener.addr() {
                let _ = std::fs::remove_file(p);
            }
            let _ = ctl.deregister(&listener);
        }
    }

    /// True if `token` belongs to this host (route `on_io` here).
    pub fn owns(&self, token: Token) -> bool {
        self.clients.by_token.contains_key(&token)
            || self.listeners.iter().any(|(_, t)| *t == token)
    }

    /// Counters.
    pub fn stats(&self) -> HostStats {
        let mut s = self.clients.stats;
        s.frames_discarded += self
            .clients
            .by_token
            .values()
            .map(|c| c.conn.frames_discarded())
            .sum::<u64>();
        s
    }

    /// Credentials of a connected client (a relayed one's from its
    /// SetPeerIdentity).
    pub fn peer_cred(&self, client: ClientId) -> Option<PeerCred> {
        let token = self.clients.by_id.get(&client)?;
        self.clients.by_token.get(token).map(Client::effective_cred)
    }

    /// The machine a relayed client named; `None` for local clients.
    pub fn peer_machine(&self, client: ClientId) -> Option<&RemoteMachine> {
        let token = self.clients.by_id.get(&client)?;
        let c = self.clients.by_token.get(token)?;
        c.identity.as_ref().map(|(_, m)| m)
    }

    /// Number of connected clients.
    pub fn client_count(&self) -> usize {
        self.clients.by_token.len()
    }

    /// Bytes queued for `client` and not yet written to its socket (None
    /// if the client is gone or being dropped). Lets services stream large
    /// replies at the pace the client reads.
    pub fn queued_bytes(&self, client: ClientId) -> Option<usize> {
        let token = self.clients.by_id.get(&client)?;
        let c = self.clients.by_token.get(token)?;
        (!c.dead).then(|| c.conn.queued_bytes())
    }

    /// Sends a successful reply whose message is already serialized at
    /// `buf[payload_start..]`: the frame header goes into the free bytes in
    /// front of it (at least [`REPLY_HEADER_MAX`]), so the frame leaves in
    /// one write without being copied (see [`Conn::send_framed`]). Meant
    /// for large streamed replies. Returns true if the client can take more
    /// right away; false if it is gone or was just dropped, or if its
    /// socket is full (then wait until [`queued_bytes`](Self::queued_bytes)
    /// is 0). Replies to a `drop_reply` call are discarded.
    pub fn reply_in_place(
        &mut self,
        to: &ReplyTo,
        buf: &mut [u8],
        payload_start: usize,
        has_more: bool,
    ) -> bool {
        self.clients.send_in_place(to, buf, payload_start, has_more)
    }

    /// Handles readiness of a token this host [`owns`](Self::owns); other
    /// tokens are ignored. Also reaps clients dropped since the last call.
    pub fn on_io<M>(
        &mut self,
        ctl: &mut LoopCtl<'_, M>,
        token: Token,
        ready: Ready,
        services: &mut dyn Services,
    ) {
        if let Some(i) = self.listeners.iter().position(|(_, t)| *t == token) {
            self.accept_all(ctl, i);
        } else if self.clients.by_token.contains_key(&token) {
            self.client_io(token, ready, services);
        }
        self.reap(ctl, services);
    }

    fn accept_all<M>(&mut self, ctl: &mut LoopCtl<'_, M>, i: usize) {
        loop {
            let (stream, cred) = match self.listeners[i].0.accept() {
                Ok(Some(c)) => c,
                Ok(None) => return,
                Err(e) => {
                    // E.g. EMFILE: log and wait for the next edge.
                    log_warn!("accept failed: {e}");
                    return;
                }
            };
            let remote_host = stream.peer_host();
            let why = match (stream.is_network(), &remote_host) {
                (false, _) => self.over_limit(cred.uid),
                (true, Some(host)) => self.over_network_limit(host),
                // The peer is already gone.
                (true, None) => continue,
            };
            if let Some(why) = why {
                self.refuse(cred, remote_host.as_deref(), why);
                continue;
            }
            if let Err(e) = self.add_client(ctl, stream, cred, remote_host) {
                log_warn!("registering client failed: {e}");
            }
        }
    }

    fn over_limit(&self, uid: u32) -> Option<&'static str> {
        self.over_limit_with(uid, self.clients.by_token.len())
    }

    fn over_limit_with(&self, uid: u32, live: usize) -> Option<&'static str> {
        let of_uid = self.clients_per_uid.get(&uid).copied().unwrap_or(0);
        if of_uid >= self.max_clients_per_uid {
            Some("per-uid")
        } else if live >= self.max_clients {
            Some("total")
        } else {
            None
        }
    }

    fn over_network_limit(&self, host: &str) -> Option<&'static str> {
        let of_host = self.clients_per_address.get(host).copied().unwrap_or(0);
        if of_host >= self.max_clients_per_address {
            Some("per-address")
        } else if self.network_clients >= self.max_network_clients {
            Some("network")
        } else if self.clients.by_token.len() >= self.max_clients {
            Some("total")
        } else {
            None
        }
    }

    /// Logs a refused connection: the first, then every 100th of a storm.
    fn refuse(&mut self, cred: PeerCred, remote_host: Option<&str>, why: &str) {
        let n = &mut self.clients.stats.clients_refused;
        *n += 1;
        if *n % 100 == 1 {
            let (total, per_uid) = (self.max_clients, self.max_clients_per_uid);
            let (net, per_addr) = (self.max_network_clients, self.max_clients_per_address);
            let who = match remote_host {
                Some(h) => format!("network peer {h}"),
                None => format!("pid {} uid {}", cred.pid, cred.uid),
            };
            log_warn!(
                "refusing a connection from {who}: {why} client limit reached ({total} in \
                 all, {per_uid} per uid, {net} network, {per_addr} per address); {n} \
                 refused so far"
            );
        }
    }

    fn add_client<M>(
        &mut self,
        ctl: &mut LoopCtl<'_, M>,
        stream: UnixStream,
        cred: PeerCred,
        remote_host: Option<String>,
    ) -> io::Result<()> {
        if stream.is_network() {
            let (idle, every) = (KEEPALIVE_IDLE, KEEPALIVE_INTERVAL);
            if let Err(e) = stream.set_keepalive(idle, every, KEEPALIVE_PROBES) {
                log_debug!("no keepalive on a network connection: {e}");
            }
        }
        // Writable too: edge-triggered, so it only fires when a full send
        // buffer drains, which is exactly when the queue needs flushing.
        let token = ctl.register(&stream, Interest::READABLE | Interest::WRITABLE)?;
        self.next_client += 1;
        let id = ClientId(self.next_client);
        log_debug!(
            "client {} connected (pid {}, uid {})",
            id.0,
            cred.pid,
            cred.uid
        );
        self.clients.stats.clients_accepted += 1;
        let tcp = stream.is_network();
        let mut identity_deadline = None;
        match (tcp, &remote_host) {
            (true, Some(host)) => {
                *self.clients_per_address.entry(host.clone()).or_default() += 1;
                self.network_clients += 1;
                identity_deadline = Some(Instant::now() + IDENTITY_DEADLINE);
                if self.identity_timer.is_none() {
                    self.identity_timer = Some(ctl.add_timer(IDENTITY_DEADLINE));
                }
            }
            _ => *self.clients_per_uid.entry(cred.uid).or_default() += 1,
        }
        self.clients.by_id.insert(id, token);
        self.clients.by_token.insert(
            token,
            Client {
                id,
                cred,
                tcp,
                identity: None,
                remote_host,
                identity_deadline,
                conn: Conn::new(stream, self.max_queued).with_budget(self.queue_budget.clone()),
                dead: false,
            },
        );
        Ok(())
    }

    /// Handles a loop timer; true if it was this host's (then it drops
    /// the network connections past their identity deadline). Route every
    /// `on_timer` here first.
    pub fn on_timer<M>(
        &mut self,
        ctl: &mut LoopCtl<'_, M>,
        id: TimerId,
        services: &mut dyn Services,
    ) -> bool {
        if self.identity_timer != Some(id) {
            return false;
        }
        self.identity_timer = None;
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        let mut late = Vec::new();
        for (token, c) in &self.clients.by_token {
            match c.identity_deadline {
                Some(d) if d <= now && !c.dead => late.push(*token),
                Some(d) if !c.dead => next = Some(next.map_or(d, |n| n.min(d))),
                _ => {}
            }
        }
        if !late.is_empty() {
            log_warn!(
                "dropping {} network connection(s) that sent no SetPeerIdentity within {} s",
                late.len(),
                IDENTITY_DEADLINE.as_secs()
            );
            self.clients.stats.clients_dropped_identity += late.len() as u64;
            for token in late {
                self.clients.kill(token);
            }
        }
        if let Some(at) = next {
            self.identity_timer = Some(ctl.add_timer(at.saturating_duration_since(now)));
        }
        self.reap(ctl, services);
        true
    }

    fn client_io(&mut self, token: Token, ready: Ready, services: &mut dyn Services) {
        if ready.writable {
            if let Some(c) = self.clients.by_token.get_mut(&token) {
                if let Err(e) = c.conn.flush() {
                    log_debug!("client {}: {e}", c.id.0);
                    self.clients.kill(token);
                }
            }
        }
        let mut frames = Vec::new();
        loop {
            let Some(c) = self.clients.by_token.get_mut(&token) else {
                return;
            };
            if c.dead {
                return;
            }
            let status = c.conn.read_some(&mut frames);
            let (id, cred) = (c.id, c.cred);
            if c.tcp && c.identity.is_none() && frames.is_empty() && c.conn.bytes_consumed() > 0 {
                log_warn!(
                    "client {} (network): an empty or unparsable frame before \
                     SetPeerIdentity; dropping it",
                    id.0
                );
                self.clients.stats.clients_dropped_identity += 1;
                self.clients.kill(token);
                return;
            }
            for r in frames.drain(..) {
                let Some(peer) = self.gate_identity(token, &r) else {
                    return;
                };
                self.handle_frame(id, peer, r, services);
            }
            match status {
                Ok(ReadStatus::Progress) => continue,
                Ok(ReadStatus::WouldBlock) => return,
                Ok(ReadStatus::Eof) => {
                    self.clients.kill(token);
                    return;
                }
                Err(e) => {
                    log_warn!("client {} (pid {}): {e}; dropping it", id.0, cred.pid);
                    self.clients.stats.clients_dropped_bad += 1;
                    self.clients.kill(token);
                    return;
                }
            }
        }
    }

    /// Applies the identity-first rule of TCP and vsock connections (module docs).
    /// Returns the caller's credentials, or `None` if it was dropped.
    fn gate_identity(&mut self, token: Token, r: &Received) -> Option<PeerCred> {
        let c = self.clients.by_token.get_mut(&token)?;
        if c.dead {
            return None;
        }
        let is_identity = matches!(r.frame.msg, OneOfmsg::set_peer_identity(_));
        if !c.tcp {
            return Some(c.cred);
        }
        let verdict = match (&c.identity, &r.frame.msg) {
            (None, _) if r.offset != 0 => {
                Err("an empty or unparsable frame before SetPeerIdentity")
            }
            (None, OneOfmsg::set_peer_identity(m)) => match check_identity(m) {
                Ok(ident) => {
                    log_info!(
                        "client {}: relayed peer pid {} uid {} on machine {:?} ({:?})",
                        c.id.0,
                        ident.0.pid,
                        ident.0.uid,
                        ident.1.machine_id_hint,
                        ident.1.machine_name
                    );
                    c.identity = Some(ident);
                    c.identity_deadline = None;
                    Ok(())
                }
                Err(why) => Err(why),
            },
            (None, _) => Err("a frame before SetPeerIdentity"),
            (Some(_), _) if is_identity => Err("a second SetPeerIdentity"),
            (Some(_), _) => Ok(()),
        };
        match verdict {
            Ok(()) => Some(c.effective_cred()),
            Err(why) => {
                log_warn!("client {} (network): {why}; dropping it", c.id.0);
                self.clients.stats.clients_dropped_identity += 1;
                self.clients.kill(token);
                None
            }
        }
    }

    fn handle_frame(
        &mut self,
        client: ClientId,
        peer: PeerCred,
        r: Received,
        services: &mut dyn Services,
    ) {
        let request_id = r.frame.request_id.unwrap_or(0);
        match r.frame.msg {
            OneOfmsg::msg_bind_service(bind) => {
                let name = bind.service_name.unwrap_or_default();
                let found = self.services.iter().position(|s| s.name == name);
                let reply = match found {
                    Some(i) => BindServiceReply {
                        success: Some(true),
                        service_id: Some(i as u32 + 1),
                        methods: self.services[i]
                            .methods
                            .iter()
                            .enumerate()
                            .map(|(m, n)| MethodInfo {
                                id: Some(m as u32 + 1),
                                name: Some(n.clone()),
                            })
                            .collect(),
                    },
                    None => {
                        log_debug!("client {}: unknown service {name:?}", client.0);
                        BindServiceReply {
                            success: Some(false),
                            ..Default::default()
                        }
                    }
                };
                self.clients.send(
                    client,
                    request_id,
                    OneOfmsg::msg_bind_service_reply(reply),
                    None,
                );
            }
            OneOfmsg::msg_invoke_method(inv) => {
                self.invoke(client, peer, request_id, inv, r.fd, services)
            }
            OneOfmsg::set_peer_identity(_) => {
                // TCP identities were taken by `gate_identity`; on a UNIX
                // socket the kernel's credentials stand.
                log_debug!("client {}: SetPeerIdentity handled or ignored", client.0);
            }
            _ => {
                self.clients.stats.unknown_requests += 1;
                let err = RequestError {
                    error: Some("unknown request".to_string()),
                };
                self.clients
                    .send(client, request_id, OneOfmsg::msg_request_error(err), None);
            }
        }
    }

    fn invoke(
        &mut self,
        client: ClientId,
        peer: PeerCred,
        request_id: u64,
        inv: InvokeMethod,
        fd: Option<OwnedFd>,
        services: &mut dyn Services,
    ) {
        let reply_to = ReplyTo {
            client,
            request_id,
            drop_reply: inv.drop_reply.unwrap_or(false),
        };
        let service_id_untrusted = inv.service_id.unwrap_or(0) as usize;
        let method_id_untrusted = inv.method_id.unwrap_or(0) as usize;
        let desc = service_id_untrusted
            .checked_sub(1)
            .and_then(|i| self.services.get(i));
        let method = desc.and_then(|d| {
            method_id_untrusted
                .checked_sub(1)
                .and_then(|m| d.methods.get(m))
        });
        let Some(method_name) = method else {
            log_debug!(
                "client {}: invalid method {service_id_untrusted}/{method_id_untrusted}",
                client.0
            );
            // Like Perfetto, reject even when drop_reply is set: the
            // client ignores replies to requests it does not track.
            let forced = ReplyTo {
                drop_reply: false,
                ..reply_to
            };
            self.clients.reply(&forced, Reply::fail());
            return;
        };
        let remote = self.peer_machine(client).cloned();
        let call = Call {
            client,
            peer,
            remote,
            service: ServiceId(service_id_untrusted as u32),
            method_id: method_id_untrusted as u32,
            method_name,
            args: inv.args_proto.unwrap_or_default(),
            fd,
            reply_to,
        };
        services.invoke(call, &mut self.clients);
    }

    /// Removes dead clients and tells the services.
    fn reap<M>(&mut self, ctl: &mut LoopCtl<'_, M>, services: &mut dyn Services) {
        // Services may drop more clients while being notified: loop.
        loop {
            let dead = std::mem::take(&mut self.clients.dead);
            if dead.is_empty() {
                return;
            }
            for token in dead {
                let Some(c) = self.clients.by_token.remove(&token) else {
                    continue;
                };
                self.clients.by_id.remove(&c.id);
                match &c.remote_host {
                    Some(host) if c.tcp => {
                        self.network_clients -= 1;
                        if let Some(n) = self.clients_per_address.get_mut(host) {
                            *n -= 1;
                            if *n == 0 {
                                self.clients_per_address.remove(host);
                            }
                        }
                    }
                    _ => {
                        if let Some(n) = self.clients_per_uid.get_mut(&c.cred.uid) {
                            *n -= 1;
                            if *n == 0 {
                                self.clients_per_uid.remove(&c.cred.uid);
                            }
                        }
                    }
                }
                // Give back the tables a connection storm grew.
                let live = self.clients.by_token.len();
                if self.clients.by_token.capacity() > 64
                    && live * 4 < self.clients.by_token.capacity()
                {
                    self.clients.by_token.shrink_to(live * 2);
                    self.clients.by_id.shrink_to(live * 2);
                }
                self.clients.stats.frames_discarded += c.conn.frames_discarded();
                let _ = ctl.deregister(c.conn.socket());
                let id = c.id;
                log_debug!("client {} disconnected", id.0);
                drop(c); // Closes the socket.
                services.on_client_disconnected(id, &mut self.clients);
            }
        }
    }
}

impl Client {
    fn effective_cred(&self) -> PeerCred {
        self.identity.as_ref().map_or(self.cred, |(c, _)| *c)
    }
}

/// Validates an untrusted SetPeerIdentity: a machine hint present (it is
/// what tells machines apart), strings bounded.
fn check_identity(
    m: &crate::pb::protos::mod_IPCFrame::SetPeerIdentity,
) -> Result<(PeerCred, RemoteMachine), &'static str> {
    let hint_untrusted = m.machine_id_hint.clone().unwrap_or_default();
    let name_untrusted = m.machine_name.clone().unwrap_or_default();
    if hint_untrusted.is_empty() {
        return Err("SetPeerIdentity without a machine_id_hint");
    }
    if hint_untrusted.len() > MAX_MACHINE_STRING || name_untrusted.len() > MAX_MACHINE_STRING {
        return Err("SetPeerIdentity string too long");
    }
    let cred = PeerCred {
        pid: m.pid.unwrap_or(0),
        uid: m.uid.map_or(PeerCred::REMOTE.uid, |u| u as u32),
        gid: PeerCred::REMOTE.gid,
    };
    let machine = RemoteMachine {
        machine_id_hint: hint_untrusted,
        machine_name: name_untrusted,
    };
    Ok((cred, machine))
}

impl Clients {
    /// Marks a client dead and shuts its socket down. The shutdown also
    /// wakes the loop with a hang-up event on the client's token, so the
    /// host reaps it promptly even when this ran outside `on_io`.
    fn kill(&mut self, token: Token) {
        if let Some(c) = self.by_token.get_mut(&token) {
            if !c.dead {
                c.dead = true;
                self.dead.push(token);
                let _ = c.conn.socket().shutdown();
            }
        }
    }

    fn send(
        &mut self,
        client: ClientId,
        request_id: u64,
        msg: OneOfmsg,
        fd: Option<OwnedFd>,
    ) -> bool {
        let Some(&token) = self.by_id.get(&client) else {
            return false;
        };
        let Some(c) = self.by_token.get_mut(&token) else {
            return false;
        };
        if c.dead {
            return false;
        }
        let frame = IPCFrame {
            request_id: Some(request_id),
            msg,
            ..Default::default()
        };
        match c.conn.send(&frame, fd) {
            Ok(()) => true,
            Err(SendError::TooLarge(e)) => {
                // Our own bug (a service built a reply over the limit): the
                // caller learns success=false rather than losing the client.
                crate::log_error!("client {}: reply not sent: {e}", client.0);
                let fail = InvokeMethodReply {
                    success: Some(false),
                    ..Default::default()
                };
                let frame = IPCFrame {
                    request_id: Some(request_id),
                    msg: OneOfmsg::msg_invoke_method_reply(fail),
                    ..Default::default()
                };
                let _ = c.conn.send(&frame, None);
                false
            }
            Err(SendError::QueueFull { queued }) => {
                log_info!(
                    "client {} (pid {}) is not reading ({queued} bytes queued); dropping it",
                    client.0,
                    c.cred.pid
                );
                self.stats.clients_dropped_slow += 1;
                self.kill(token);
                false
            }
            Err(SendError::Io(e)) => {
                log_debug!("client {}: {e}", client.0);
                self.kill(token);
                false
            }
        }
    }
}

impl Clients {
    fn send_in_place(
        &mut self,
        to: &ReplyTo,
        buf: &mut [u8],
        payload_start: usize,
        has_more: bool,
    ) -> bool {
        let Some(&token) = self.by_id.get(&to.client) else {
            return false;
        };
        let Some(c) = self.by_token.get_mut(&token) else {
            return false;
        };
        if c.dead {
            return false;
        }
        if to.drop_reply {
            return true;
        }
        let start = match put_reply_header(buf, payload_start, to.request_id, has_more) {
            Ok(start) => start,
            Err(e) => {
                // As in `send`: the caller learns success=false.
                crate::log_error!("client {}: reply not sent: {e}", to.client.0);
                self.reply(to, Reply::fail());
                return false;
            }
        };
        match c.conn.send_framed(&buf[start..]) {
            Ok(more) => more,
            Err(SendError::QueueFull { queued }) => {
                log_info!(
                    "client {} (pid {}) is not reading ({queued} bytes queued); dropping it",
                    to.client.0,
                    c.cred.pid
                );
                self.stats.clients_dropped_slow += 1;
                self.kill(token);
                false
            }
            Err(e) => {
                log_debug!("client {}: {e}", to.client.0);
                self.kill(token);
                false
            }
        }
    }
}

impl ReplySink for Clients {
    fn reply(&mut self, to: &ReplyTo, reply: Reply) -> bool {
        if to.drop_reply {
            return false;
        }
        let msg = InvokeMethodReply {
            success: Some(reply.success),
            has_more: Some(reply.has_more),
            reply_proto: if reply.success {
                Some(reply.payload)
            } else {
                None
            },
        };
        self.send(
            to.client,
            to.request_id,
            OneOfmsg::msg_invoke_method_reply(msg),
            reply.fd,
        )
    }

    fn disconnect(&mut self, client: ClientId) {
        if let Some(&token) = self.by_id.get(&client) {
            self.kill(token);
        }
    }
}

/// Replies from outside `on_io` (timers, messages, deferred work).
impl ReplySink for Host {
    fn reply(&mut self, to: &ReplyTo, reply: Reply) -> bool {
        self.clients.reply(to, reply)
    }
    fn disconnect(&mut self, client: ClientId) {
        self.clients.disconnect(client)
    }
}

/// A ready-made [`Handler`] for processes whose only I/O is one host
/// (tests, simple daemons): posting `()` to its loop makes it quit.
/// Larger applications embed [`Host`] in their own handler and route
/// tokens with [`Host::owns`].
#[derive(Debug)]
pub struct HostApp<S> {
    /// The host.
    pub host: Host,
    /// The services it dispatches to.
    pub services: S,
}

impl<S: Services> Handler for HostApp<S> {
    type Msg = ();
    fn on_io(&mut self, ctl: &mut LoopCtl<'_, ()>, token: Token, ready: Ready) {
        self.host.on_io(ctl, token, ready, &mut self.services);
    }
    fn on_timer(&mut self, ctl: &mut LoopCtl<'_, ()>, id: TimerId) {
        self.host.on_timer(ctl, id, &mut self.services);
    }
    fn on_message(&mut self, ctl: &mut LoopCtl<'_, ()>, _msg: ()) {
        ctl.quit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::event_loop::{EventLoop, TaskRunner, TimerId};
    use std::time::Duration;

    #[test]
    fn client_limits_per_uid_and_in_all() {
        let mut h = Host::new();
        h.set_client_limits(5, 2);
        h.clients_per_uid.insert(1000, 2);
        h.clients_per_uid.insert(1001, 1);
        assert_eq!(h.over_limit_with(1000, 3), Some("per-uid"));
        assert_eq!(h.over_limit_with(1001, 3), None);
        assert_eq!(h.over_limit_with(1002, 4), None);
        assert_eq!(h.over_limit_with(1002, 5), Some("total"));
    }

    /// Parks every call; replies come later from a timer.
    #[derive(Default)]
    struct Parking {
        parked: Vec<ReplyTo>,
        disconnected: Vec<ClientId>,
    }

    impl Services for Parking {
        fn invoke(&mut self, call: Call<'_>, _out: &mut dyn ReplySink) {
            self.parked.push(call.reply_to);
        }
        fn on_client_disconnected(&mut self, client: ClientId, _out: &mut dyn ReplySink) {
            self.disconnected.push(client);
        }
    }

    struct App {
        host: Host,
        services: Parking,
        flood_timer: Option<TimerId>,
    }

    impl Handler for App {
        type Msg = ();
        fn on_io(&mut self, ctl: &mut LoopCtl<'_, ()>, token: Token, ready: Ready) {
            self.host.on_io(ctl, token, ready, &mut self.services);
            if !self.services.parked.is_empty() && self.flood_timer.is_none() {
                self.flood_timer = Some(ctl.add_timer(Duration::ZERO));
            }
            if !self.services.disconnected.is_empty() {
                ctl.quit();
            }
        }
        fn on_timer(&mut self, _ctl: &mut LoopCtl<'_, ()>, _id: TimerId) {
            // Outside on_io: the overflow drop must still be reaped,
            // woken by the hang-up event of our own shutdown.
            let to = self.services.parked[0];
            while self.host.reply(&to, Reply::more(vec![0; 60 * 1024])) {}
            assert!(
                !self.host.reply(&to, Reply::ok(vec![])),
                "dead client accepted a reply"
            );
        }
    }

    #[test]
    fn client_dropped_from_a_timer_is_reaped_and_reported() {
        let mut el = EventLoop::new().unwrap();
        let mut host = Host::new();
        host.set_max_queued_bytes(256 * 1024);
        host.expose_service("P", &["M"]);
        let addr =
            SockAddr::Abstract(format!("tracebox-host-unit-{}", std::process::id()).into_bytes());
        host.listen(&mut el.ctl(), &addr).unwrap();

        // A client that sends one call and never reads.
        let sock = UnixStream::connect(&addr).unwrap();
        let mut conn = Conn::new(sock, 1 << 20);
        let invoke = |id, service_id, method_id| IPCFrame {
            request_id: Some(id),
            msg: OneOfmsg::msg_invoke_method(InvokeMethod {
                service_id: Some(service_id),
                method_id: Some(method_id),
                ..Default::default()
            }),
            ..Default::default()
        };
        conn.send(&invoke(1, 1, 1), None).unwrap();

        let mut app = App {
            host,
            services: Parking::default(),
            flood_timer: None,
        };
        el.run(&mut app).unwrap();
        assert_eq!(app.services.disconnected, vec![ClientId(1)]);
        assert_eq!(app.host.client_count(), 0);
        let stats = app.host.stats();
        assert_eq!((stats.clients_accepted, stats.clients_dropped_slow), (1, 1));
    }
}

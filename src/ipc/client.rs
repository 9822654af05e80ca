//! The client side of the IPC, in two flavours over one core:
//!
//! * [`Client`]: non-blocking, driven by the application's event loop.
//!   Requests return their request id at once; [`Client::on_io`] turns
//!   incoming frames into [`ClientEvent`]s (binds, replies, stream items,
//!   disconnection) that the application matches by request id.
//! * [`BlockingClient`]: for CLIs and tests. `bind_service` and `invoke`
//!   wait for their answers; streams are read with
//!   [`BlockingClient::next_reply`].
//!
//! Request ids start at 1 and increase. Replies for unknown (or finished)
//! request ids are ignored. A request stays pending while replies carry
//! `has_more=true`.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::base::event_loop::{Interest, LoopCtl, Ready, Token};
use crate::base::sock_addr::SockAddr;
use crate::base::unix_socket::{wait_ready, UnixStream};
use crate::pb::protos::mod_IPCFrame::{BindService, InvokeMethod, OneOfmsg};
use crate::pb::protos::IPCFrame;

use super::conn::{Conn, ReadStatus, RecvError, SendError, DEFAULT_MAX_QUEUED_BYTES};

/// A bound service: its host-assigned id and method table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundService {
    /// Name that was bound.
    pub name: String,
    /// Host-assigned service id.
    pub service_id: u32,
    /// `(method id, method name)` as the host declared them.
    pub methods: Vec<(u32, String)>,
}

impl BoundService {
    /// Id of `method`, looked up by name (ids are host-defined).
    pub fn method_id(&self, method: &str) -> Option<u32> {
        self.methods
            .iter()
            .find(|(_, n)| n == method)
            .map(|(id, _)| *id)
    }
}

/// One `InvokeMethodReply`.
#[derive(Debug)]
pub struct ClientReply {
    /// The request this answers.
    pub request_id: u64,
    /// False if the host rejected the call or it failed.
    pub success: bool,
    /// More replies to this request follow.
    pub has_more: bool,
    /// Serialized reply message (empty on failure).
    pub payload: Vec<u8>,
    /// fd that came with this reply.
    pub fd: Option<OwnedFd>,
}

/// What [`Client::on_io`] reports.
#[derive(Debug)]
pub enum ClientEvent {
    /// Answer to [`Client::bind_service`]; `None` if the host does not
    /// know the service.
    Bound {
        /// The bind request.
        request_id: u64,
        /// The service, if bound.
        service: Option<BoundService>,
    },
    /// A reply (or stream item) to an invoke.
    Reply(ClientReply),
    /// The host did not understand a request.
    RequestError {
        /// The request.
        request_id: u64,
        /// The host's message.
        error: String,
    },
    /// The connection is gone (EOF, error, oversized frame). Reported once;
    /// the client is deregistered.
    Disconnected,
}

/// Errors of the client API.
#[derive(Debug)]
pub enum ClientError {
    /// Socket or connect error.
    Io(io::Error),
    /// The host closed the connection (or broke the protocol).
    Disconnected,
    /// No answer within the configured timeout.
    TimedOut,
    /// The host does not expose this service.
    UnknownService(String),
    /// The bound service has no such method.
    UnknownMethod(String),
    /// The host answered RequestError.
    RequestError(String),
    /// The request exceeded the frame limit, or the send queue is full.
    Send(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Io(e) => write!(f, "IPC error: {e}"),
            ClientError::Disconnected => f.write_str("IPC connection closed by the service"),
            ClientError::TimedOut => f.write_str("timed out waiting for the service"),
            ClientError::UnknownService(s) => write!(f, "service {s:?} not available"),
            ClientError::UnknownMethod(m) => write!(f, "method {m:?} not available"),
            ClientError::RequestError(e) => write!(f, "request rejected: {e}"),
            ClientError::Send(e) => write!(f, "cannot send request: {e}"),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> Self {
        ClientError::Io(e)
    }
}

impl From<SendError> for ClientError {
    fn from(e: SendError) -> Self {
        match e {
            SendError::Io(e) => ClientError::Io(e),
            other => ClientError::Send(other.to_string()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pending {
    Bind(String),
    Invoke,
}

/// State shared by both flavours: connection, request ids, pending table.
#[derive(Debug)]
struct Core {
    conn: Conn,
    next_request_id: u64,
    pending: HashMap<u64, Pending>,
}

impl Core {
    fn new(sock: UnixStream) -> Self {
        Core {
            conn: Conn::new(sock, DEFAULT_MAX_QUEUED_BYTES),
            next_request_id: 1,
            pending: HashMap::new(),
        }
    }

    fn send_request(
        &mut self,
        msg: OneOfmsg,
        fd: Option<OwnedFd>,
        pending: Option<Pending>,
    ) -> Result<u64, SendError> {
        let request_id = self.next_request_id;
        self.next_request_id += 1;
        let frame = IPCFrame {
            request_id: Some(request_id),
            msg,
            ..Default::default()
        };
        self.conn.send(&frame, fd)?;
        if let Some(p) = pending {
            self.pending.insert(request_id, p);
        }
        Ok(request_id)
    }

    fn bind(&mut self, name: &str) -> Result<u64, SendError> {
        let msg = OneOfmsg::msg_bind_service(BindService {
            service_name: Some(name.to_string()),
        });
        self.send_request(msg, None, Some(Pending::Bind(name.to_string())))
    }

    fn invoke(
        &mut self,
        service_id: u32,
        method_id: u32,
        args: &[u8],
        fd: Option<OwnedFd>,
        drop_reply: bool,
    ) -> Result<u64, SendError> {
        let msg = OneOfmsg::msg_invoke_method(InvokeMethod {
            service_id: Some(service_id),
            method_id: Some(method_id),
            args_proto: Some(args.to_vec()),
            drop_reply: if drop_reply { Some(true) } else { None },
        });
        self.send_request(
            msg,
            fd,
            if drop_reply {
                None
            } else {
                Some(Pending::Invoke)
            },
        )
    }

    /// Turns one incoming frame into an event, if it answers a pending request.
    fn on_frame(&mut self, frame: IPCFrame, fd: Option<OwnedFd>) -> Option<ClientEvent> {
        let request_id = frame.request_id.unwrap_or(0);
        let pending = self.pending.get(&request_id)?;
        match (frame.msg, pending) {
            (OneOfmsg::msg_bind_service_reply(r), Pending::Bind(name)) => {
                let service = (r.success == Some(true)).then(|| BoundService {
                    name: name.clone(),
                    service_id: r.service_id.unwrap_or(0),
                    methods: r
                        .methods
                        .into_iter()
                        .map(|m| (m.id.unwrap_or(0), m.name.unwrap_or_default()))
                        .collect(),
                });
                self.pending.remove(&request_id);
                Some(ClientEvent::Bound {
                    request_id,
                    service,
                })
            }
            (OneOfmsg::msg_invoke_method_reply(r), Pending::Invoke) => {
                let success = r.success.unwrap_or(false);
                let has_more = success && r.has_more.unwrap_or(false);
                if !has_more {
                    self.pending.remove(&request_id);
                }
                Some(ClientEvent::Reply(ClientReply {
                    request_id,
                    success,
                    has_more,
                    payload: r.reply_proto.unwrap_or_default(),
                    fd,
                }))
            }
            (OneOfmsg::msg_request_error(e), _) => {
                self.pending.remove(&request_id);
                Some(ClientEvent::RequestError {
                    request_id,
                    error: e.error.unwrap_or_default(),
                })
            }
            _ => None, // Mismatched reply type: ignore, like unknown ids.
        }
    }

    /// Reads what is available (one recv) into events.
    fn read_some(&mut self, events: &mut Vec<ClientEvent>) -> Result<ReadStatus, RecvError> {
        let mut frames = Vec::new();
        let status = self.conn.read_some(&mut frames);
        for r in frames {
            events.extend(self.on_frame(r.frame, r.fd));
        }
        status
    }
}

/// Event-loop client. Route `on_io` for [`token`](Self::token) to it.
#[derive(Debug)]
pub struct Client {
    core: Core,
    token: Token,
    connected: bool,
}

impl Client {
    /// Connects to `addr` and registers with the loop.
    pub fn connect<M>(ctl: &mut LoopCtl<'_, M>, addr: &SockAddr) -> io::Result<Self> {
        let sock = UnixStream::connect(addr)?;
        let token = ctl.register(&sock, Interest::READABLE | Interest::WRITABLE)?;
        Ok(Client {
            core: Core::new(sock),
            token,
            connected: true,
        })
    }

    /// The loop token of the connection.
    pub fn token(&self) -> Token {
        self.token
    }

    /// False once [`ClientEvent::Disconnected`] was reported.
    pub fn is_connected(&self) -> bool {
        self.connected
    }

    /// Sends BindService; the answer is a [`ClientEvent::Bound`].
    pub fn bind_service(&mut self, name: &str) -> Result<u64, ClientError> {
        self.check_connected()?;
        Ok(self.core.bind(name)?)
    }

    /// Sends InvokeMethod; answers are [`ClientEvent::Reply`]s (none if
    /// `drop_reply`). `fd` is passed along with the request.
    pub fn invoke(
        &mut self,
        service_id: u32,
        method_id: u32,
        args: &[u8],
        fd: Option<OwnedFd>,
        drop_reply: bool,
    ) -> Result<u64, ClientError> {
        self.check_connected()?;
        Ok(self
            .core
            .invoke(service_id, method_id, args, fd, drop_reply)?)
    }

    /// Sends InvokeMethod with `drop_reply`, its `args_len` bytes of
    /// arguments appended by `write_args` straight into the frame (one
    /// copy of a large payload instead of three). `frame` is scratch space
    /// kept by the caller between calls.
    pub fn invoke_in_place(
        &mut self,
        service_id: u32,
        method_id: u32,
        args_len: usize,
        frame: &mut Vec<u8>,
        write_args: impl FnOnce(&mut Vec<u8>),
    ) -> Result<u64, ClientError> {
        self.check_connected()?;
        let request_id = self.core.next_request_id;
        frame.clear();
        crate::ipc::frame::put_invoke_header(frame, request_id, service_id, method_id, args_len)
            .map_err(SendError::TooLarge)?;
        let start = frame.len();
        write_args(frame);
        debug_assert_eq!(frame.len() - start, args_len);
        self.core.next_request_id += 1;
        self.core.conn.send_framed(frame)?;
        Ok(request_id)
    }

    /// Bytes queued for the socket, not yet taken by it.
    pub fn queued_bytes(&self) -> usize {
        self.core.conn.queued_bytes()
    }

    /// Waits up to `timeout` for the socket to take queued bytes, writing
    /// them as it does; true once nothing is queued. Backpressure for a
    /// producer whose data leaves only through the socket.
    pub fn drain_queue(&mut self, timeout: Duration) -> Result<bool, ClientError> {
        let deadline = Instant::now() + timeout;
        loop {
            self.core.conn.flush().map_err(ClientError::Io)?;
            if !self.core.conn.has_pending_output() {
                return Ok(true);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            wait_ready(self.core.conn.socket().as_fd(), false, true, Some(left))
                .map_err(ClientError::Io)?;
        }
    }

    fn check_connected(&self) -> Result<(), ClientError> {
        if self.connected {
            Ok(())
        } else {
            Err(ClientError::Disconnected)
        }
    }

    /// Handles readiness of [`token`](Self::token): flushes, reads until
    /// `WouldBlock`, and appends events.
    pub fn on_io<M>(
        &mut self,
        ctl: &mut LoopCtl<'_, M>,
        ready: Ready,
        events: &mut Vec<ClientEvent>,
    ) {
        if !self.connected {
            return;
        }
        if ready.writable && self.core.conn.flush().is_err() {
            self.close(ctl, events);
            return;
        }
        loop {
            match self.core.read_some(events) {
                Ok(ReadStatus::Progress) => continue,
                Ok(ReadStatus::WouldBlock) => return,
                Ok(ReadStatus::Eof) | Err(_) => {
                    self.close(ctl, events);
                    return;
                }
            }
        }
    }

    /// Closes the connection on our side (no event is reported). Pending
    /// requests are forgotten; later requests fail with `Disconnected`.
    pub fn shutdown<M>(&mut self, ctl: &mut LoopCtl<'_, M>) {
        if self.connected {
            let mut ignored = Vec::new();
            self.close(ctl, &mut ignored);
        }
    }

    fn close<M>(&mut self, ctl: &mut LoopCtl<'_, M>, events: &mut Vec<ClientEvent>) {
        self.connected = false;
        self.core.pending.clear();
        let _ = ctl.deregister(self.core.conn.socket());
        let _ = self.core.conn.socket().shutdown();
        events.push(ClientEvent::Disconnected);
    }
}

/// Blocking client for CLIs and tests. Each wait is bounded by the
/// timeout (default: none).
#[derive(Debug)]
pub struct BlockingClient {
    core: Core,
    timeout: Option<Duration>,
    /// Replies read while waiting for something else, per request.
    inbox: HashMap<u64, VecDeque<ClientEvent>>,
    disconnected: bool,
}

impl BlockingClient {
    /// Connects to `addr`.
    pub fn connect(addr: &SockAddr) -> Result<Self, ClientError> {
        let sock = UnixStream::connect(addr)?;
        Ok(BlockingClient {
            core: Core::new(sock),
            timeout: None,
            inbox: HashMap::new(),
            disconnected: false,
        })
    }

    /// Bounds every later wait for an answer; `None` waits forever.
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }

    /// The underlying socket (e.g. to poll it alongside other fds).
    pub fn socket(&self) -> &UnixStream {
        self.core.conn.socket()
    }

    /// Binds `name`; `UnknownService` if the host does not expose it.
    pub fn bind_service(&mut self, name: &str) -> Result<BoundService, ClientError> {
        let request_id = self.core.bind(name)?;
        match self.wait_event(request_id)? {
            ClientEvent::Bound {
                service: Some(s), ..
            } => Ok(s),
            ClientEvent::Bound { service: None, .. } => {
                Err(ClientError::UnknownService(name.to_string()))
            }
            ClientEvent::RequestError { error, .. } => Err(ClientError::RequestError(error)),
            _ => Err(ClientError::Disconnected),
        }
    }

    /// Calls `method` and collects every reply until `has_more=false`.
    /// A rejected call is `Ok` with one reply whose `success` is false.
    pub fn invoke(
        &mut self,
        service: &BoundService,
        method: &str,
        args: &[u8],
        fd: Option<OwnedFd>,
    ) -> Result<Vec<ClientReply>, ClientError> {
        let request_id = self.start_invoke(service, method, args, fd)?;
        let mut replies = Vec::new();
        while let Some(r) = self.next_reply(request_id)? {
            replies.push(r);
        }
        Ok(replies)
    }

    /// Calls `method` with `drop_reply=true` and waits until it is sent.
    pub fn invoke_no_reply(
        &mut self,
        service: &BoundService,
        method: &str,
        args: &[u8],
        fd: Option<OwnedFd>,
    ) -> Result<(), ClientError> {
        let method_id = service
            .method_id(method)
            .ok_or_else(|| ClientError::UnknownMethod(method.to_string()))?;
        self.core
            .invoke(service.service_id, method_id, args, fd, true)?;
        self.flush_all()
    }

    /// Sends a call without waiting; read answers with [`next_reply`](Self::next_reply).
    pub fn start_invoke(
        &mut self,
        service: &BoundService,
        method: &str,
        args: &[u8],
        fd: Option<OwnedFd>,
    ) -> Result<u64, ClientError> {
        let method_id = service
            .method_id(method)
            .ok_or_else(|| ClientError::UnknownMethod(method.to_string()))?;
        self.start_invoke_raw(service.service_id, method_id, args, fd)
    }

    /// Like [`start_invoke`](Self::start_invoke) with explicit ids (tests
    /// use it to send ids the host must reject).
    pub fn start_invoke_raw(
        &mut self,
        service_id: u32,
        method_id: u32,
        args: &[u8],
        fd: Option<OwnedFd>,
    ) -> Result<u64, ClientError> {
        let request_id = self.core.invoke(service_id, method_id, args, fd, false)?;
        self.flush_all()?;
        Ok(request_id)
    }

    /// True if something for `request_id` was read while waiting for
    /// another request: it is there without the socket becoming readable.
    pub fn has_queued(&self, request_id: u64) -> bool {
        self.inbox.get(&request_id).is_some_and(|q| !q.is_empty())
    }

    /// Next reply to `request_id`; `Ok(None)` once its stream has ended.
    pub fn next_reply(&mut self, request_id: u64) -> Result<Option<ClientReply>, ClientError> {
        if !self.core.pending.contains_key(&request_id)
            && self.inbox.get(&request_id).is_none_or(|q| q.is_empty())
        {
            return Ok(None);
        }
        match self.wait_event(request_id)? {
            ClientEvent::Reply(r) => Ok(Some(r)),
            ClientEvent::RequestError { error, .. } => Err(ClientError::RequestError(error)),
            _ => Err(ClientError::Disconnected),
        }
    }

    fn flush_all(&mut self) -> Result<(), ClientError> {
        let deadline = self.timeout.map(|t| Instant::now() + t);
        loop {
            self.core.conn.flush()?;
            if !self.core.conn.has_pending_output() {
                return Ok(());
            }
            self.wait(false, true, deadline)?;
        }
    }

    fn wait(
        &mut self,
        readable: bool,
        writable: bool,
        deadline: Option<Instant>,
    ) -> Result<(), ClientError> {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let fd = self.core.conn.socket().as_fd();
        if left == Some(Duration::ZERO) || !wait_ready(fd, readable, writable, left)? {
            return Err(ClientError::TimedOut);
        }
        Ok(())
    }

    /// Reads until an event for `request_id` is available.
    fn wait_event(&mut self, request_id: u64) -> Result<ClientEvent, ClientError> {
        let deadline = self.timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(ev) = self.inbox.get_mut(&request_id).and_then(|q| q.pop_front()) {
                return Ok(ev);
            }
            if self.disconnected {
                return Err(ClientError::Disconnected);
            }
            // Keep sending while waiting: a large request may still be queued.
            self.core.conn.flush()?;
            let mut events = Vec::new();
            let status = self.core.read_some(&mut events);
            for ev in events {
                let id = match &ev {
                    ClientEvent::Bound { request_id, .. }
                    | ClientEvent::RequestError { request_id, .. } => *request_id,
                    ClientEvent::Reply(r) => r.request_id,
                    ClientEvent::Disconnected => continue,
                };
                self.inbox.entry(id).or_default().push_back(ev);
            }
            match status {
                Ok(ReadStatus::Progress) => {}
                Ok(ReadStatus::WouldBlock) => {
                    let writable = self.core.conn.has_pending_output();
                    self.wait(true, writable, deadline)?;
                }
                Ok(ReadStatus::Eof) | Err(_) => {
                    self.disconnected = true;
                    self.core.pending.clear();
                }
            }
        }
    }
}

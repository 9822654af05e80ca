//! What a service sees of the IPC: calls ([`Call`]), replies ([`Reply`],
//! [`ReplyTo`], [`ReplySink`]) and the [`Services`] trait the host
//! dispatches to. No sockets here: the host (or a test's
//! [`RecordingSink`]) sits behind [`ReplySink`].
//!
//! Services that share state (ProducerPort and ConsumerPort over one
//! tracing core) implement [`Services`] once. Independent services can be
//! trait objects in a [`ServiceList`]:
//!
//! ```no_run
//! # use tracebox::ipc::host::*;
//! # use tracebox::ipc::service::*;
//! struct Echo;
//! impl Service for Echo {
//!     fn name(&self) -> &str { "EchoPort" }
//!     fn methods(&self) -> &[&str] { &["Echo"] }
//!     fn invoke(&mut self, call: Call<'_>, out: &mut dyn ReplySink) {
//!         out.reply(&call.reply_to, Reply::ok(call.args));
//!     }
//! }
//! let mut host = Host::new();
//! let mut list = ServiceList::new();
//! list.add(&mut host, Box::new(Echo));
//! // ... then pass `&mut list` to `host.on_io`, or use HostApp { host, services: list }.
//! ```

use std::os::fd::OwnedFd;

use crate::base::unix_socket::PeerCred;

/// A connected client; never reused within one host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(pub u64);

/// A service exposed by the host, numbered from 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceId(pub u32);

/// Where a reply goes. Plain data: store it for deferred or streaming
/// replies; replying after the client left is a harmless no-op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReplyTo {
    /// The calling client.
    pub client: ClientId,
    /// The request id to echo.
    pub request_id: u64,
    /// The caller asked for no reply; replies are discarded.
    pub drop_reply: bool,
}

/// One reply frame (`InvokeMethodReply`).
#[derive(Debug, Default)]
pub struct Reply {
    /// False for rejected or failed calls (then `payload` is ignored).
    pub success: bool,
    /// More replies to the same request follow (streaming).
    pub has_more: bool,
    /// Serialized reply message.
    pub payload: Vec<u8>,
    /// An fd to pass along with this reply.
    pub fd: Option<OwnedFd>,
}

impl Reply {
    /// Final successful reply.
    pub fn ok(payload: Vec<u8>) -> Self {
        Reply {
            success: true,
            has_more: false,
            payload,
            fd: None,
        }
    }
    /// Successful streaming reply; more will follow.
    pub fn more(payload: Vec<u8>) -> Self {
        Reply {
            success: true,
            has_more: true,
            payload,
            fd: None,
        }
    }
    /// Failure (`success=false`, no payload); ends any stream.
    pub fn fail() -> Self {
        Reply::default()
    }
    /// Attaches an fd.
    pub fn with_fd(mut self, fd: OwnedFd) -> Self {
        self.fd = Some(fd);
        self
    }
}

/// The machine a relayed peer says it runs on (from SetPeerIdentity).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteMachine {
    /// Tells machines apart (upstream: derived from the boot id).
    pub machine_id_hint: String,
    /// Human-readable name, may be empty.
    pub machine_name: String,
}

/// A validated method call.
#[derive(Debug)]
pub struct Call<'a> {
    /// The calling client.
    pub client: ClientId,
    /// Its credentials (`SO_PEERCRED` at accept, or a relayed peer's
    /// SetPeerIdentity).
    pub peer: PeerCred,
    /// Set for a relayed (TCP or vsock) peer: no fds reach it.
    pub remote: Option<RemoteMachine>,
    /// Which exposed service.
    pub service: ServiceId,
    /// Method id, 1..=N.
    pub method_id: u32,
    /// Method name from the service's table.
    pub method_name: &'a str,
    /// Serialized arguments, untrusted.
    pub args: Vec<u8>,
    /// The fd that came with the request frame, if any.
    pub fd: Option<OwnedFd>,
    /// Where replies go.
    pub reply_to: ReplyTo,
}

/// Sends replies; implemented by [`Host`] (and by fakes in service tests).
pub trait ReplySink {
    /// Sends one reply. Returns false if it was discarded: `drop_reply`,
    /// unknown/gone client, or the client was just dropped for not reading.
    fn reply(&mut self, to: &ReplyTo, reply: Reply) -> bool;
    /// Disconnects a client (e.g. a misbehaving producer).
    fn disconnect(&mut self, client: ClientId);
}

/// The application side: all exposed services behind one object, so that
/// several services can share state without `Rc<RefCell<_>>`.
pub trait Services {
    /// A call to a known service and method. Reply now or later via `out`.
    fn invoke(&mut self, call: Call<'_>, out: &mut dyn ReplySink);
    /// The client is gone; its pending [`ReplyTo`]s are now dead.
    fn on_client_disconnected(&mut self, _client: ClientId, _out: &mut dyn ReplySink) {}
}

/// A [`ReplySink`] that records everything, for testing service logic
/// without sockets.
#[derive(Debug, Default)]
pub struct RecordingSink {
    /// Replies in the order sent (including ones to `drop_reply` calls,
    /// which a real host would discard; check `ReplyTo::drop_reply`).
    pub replies: Vec<(ReplyTo, Reply)>,
    /// Clients the service asked to disconnect.
    pub disconnected: Vec<ClientId>,
}

impl ReplySink for RecordingSink {
    fn reply(&mut self, to: &ReplyTo, reply: Reply) -> bool {
        self.replies.push((*to, reply));
        !to.drop_reply
    }
    fn disconnect(&mut self, client: ClientId) {
        self.disconnected.push(client);
    }
}

/// One service with its own state.
pub trait Service {
    /// Bare service name clients bind to, e.g. `"ConsumerPort"`.
    fn name(&self) -> &str;
    /// Method names; ids are 1..N in this order.
    fn methods(&self) -> &[&str];
    /// A validated call (see [`Services::invoke`]).
    fn invoke(&mut self, call: Call<'_>, out: &mut dyn ReplySink);
    /// A client disconnected.
    fn on_client_disconnected(&mut self, _client: ClientId, _out: &mut dyn ReplySink) {}
}

/// Dispatches [`Services`] calls to boxed [`Service`]s by service id.
#[derive(Default)]
pub struct ServiceList {
    services: Vec<(ServiceId, Box<dyn Service>)>,
}

impl std::fmt::Debug for ServiceList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.services.iter().map(|(id, s)| (id, s.name())))
            .finish()
    }
}

/// Where services are exposed: the host numbers them (and a test may
/// stand in for it).
pub trait ExposeService {
    /// Exposes a service with its methods; returns its id.
    fn expose_service(&mut self, name: &str, methods: &[&str]) -> ServiceId;
}

impl ServiceList {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Exposes `service` on `host` and keeps it for dispatch.
    pub fn add(&mut self, host: &mut dyn ExposeService, service: Box<dyn Service>) -> ServiceId {
        let id = host.expose_service(service.name(), service.methods());
        self.services.push((id, service));
        id
    }
}

impl Services for ServiceList {
    fn invoke(&mut self, call: Call<'_>, out: &mut dyn ReplySink) {
        if let Some((_, s)) = self.services.iter_mut().find(|(id, _)| *id == call.service) {
            s.invoke(call, out);
        } else {
            // Exposed on the host directly, not through this list.
            out.reply(&call.reply_to, Reply::fail());
        }
    }

    fn on_client_disconnected(&mut self, client: ClientId, out: &mut dyn ReplySink) {
        for (_, s) in &mut self.services {
            s.on_client_disconnected(client, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Named(&'static str, u32);
    impl Service for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn methods(&self) -> &[&str] {
            &["A", "B"]
        }
        fn invoke(&mut self, call: Call<'_>, out: &mut dyn ReplySink) {
            out.reply(
                &call.reply_to,
                Reply::ok(format!("{}:{}", self.0, call.method_name).into_bytes()),
            );
        }
        fn on_client_disconnected(&mut self, _client: ClientId, _out: &mut dyn ReplySink) {
            self.1 += 1;
        }
    }

    fn call(service: ServiceId, request_id: u64, method_name: &str) -> Call<'_> {
        Call {
            client: ClientId(1),
            peer: PeerCred {
                pid: 1,
                uid: 0,
                gid: 0,
            },
            remote: None,
            service,
            method_id: 2,
            method_name,
            args: vec![],
            fd: None,
            reply_to: ReplyTo {
                client: ClientId(1),
                request_id,
                drop_reply: false,
            },
        }
    }

    /// Numbers services from 1, as the host does.
    struct Numbering(u32);
    impl ExposeService for Numbering {
        fn expose_service(&mut self, _: &str, _: &[&str]) -> ServiceId {
            self.0 += 1;
            ServiceId(self.0)
        }
    }

    #[test]
    fn dispatches_by_service_id() {
        let mut host = Numbering(0);
        let mut list = ServiceList::new();
        let a = list.add(&mut host, Box::new(Named("APort", 0)));
        let b = list.add(&mut host, Box::new(Named("BPort", 0)));
        assert_eq!((a, b), (ServiceId(1), ServiceId(2)));
        let mut out = RecordingSink::default();
        list.invoke(call(b, 5, "B"), &mut out);
        list.invoke(call(a, 6, "A"), &mut out);
        list.invoke(call(ServiceId(9), 7, "A"), &mut out);
        let got: Vec<(u64, bool, &[u8])> = out
            .replies
            .iter()
            .map(|(to, r)| (to.request_id, r.success, &r.payload[..]))
            .collect();
        let want: Vec<(u64, bool, &[u8])> = vec![
            (5, true, b"BPort:B"),
            (6, true, b"APort:A"),
            (7, false, b""),
        ];
        assert_eq!(got, want);
        list.on_client_disconnected(ClientId(1), &mut out);
        assert_eq!(
            format!("{list:?}"),
            r#"[(ServiceId(1), "APort"), (ServiceId(2), "BPort")]"#
        );
    }
}

//! Independent services as trait objects, for hosts whose services share
//! no state. Services that share state (ProducerPort and ConsumerPort over
//! one tracing core) implement [`Services`] once instead.
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

use super::host::{Call, ClientId, Host, ReplySink, ServiceId, Services};

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

impl ServiceList {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Exposes `service` on `host` and keeps it for dispatch.
    pub fn add(&mut self, host: &mut Host, service: Box<dyn Service>) -> ServiceId {
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
            out.reply(&call.reply_to, super::host::Reply::fail());
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
    use crate::base::unix_socket::PeerCred;
    use crate::ipc::host::{Reply, ReplyTo};

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

    #[derive(Default)]
    struct Collect(Vec<(u64, Vec<u8>)>);
    impl ReplySink for Collect {
        fn reply(&mut self, to: &ReplyTo, reply: Reply) -> bool {
            self.0.push((to.request_id, reply.payload));
            true
        }
        fn disconnect(&mut self, _client: ClientId) {}
    }

    fn call(service: ServiceId, request_id: u64, method_name: &str) -> Call<'_> {
        Call {
            client: ClientId(1),
            peer: PeerCred {
                pid: 1,
                uid: 0,
                gid: 0,
            },
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

    #[test]
    fn dispatches_by_service_id() {
        let mut host = Host::new();
        let mut list = ServiceList::new();
        let a = list.add(&mut host, Box::new(Named("APort", 0)));
        let b = list.add(&mut host, Box::new(Named("BPort", 0)));
        assert_eq!((a, b), (ServiceId(1), ServiceId(2)));
        let mut out = Collect::default();
        list.invoke(call(b, 5, "B"), &mut out);
        list.invoke(call(a, 6, "A"), &mut out);
        list.invoke(call(ServiceId(9), 7, "A"), &mut out);
        assert_eq!(
            out.0,
            vec![
                (5, b"BPort:B".to_vec()),
                (6, b"APort:A".to_vec()),
                (7, vec![])
            ]
        );
        list.on_client_disconnected(ClientId(1), &mut out);
        assert_eq!(
            format!("{list:?}"),
            r#"[(ServiceId(1), "APort"), (ServiceId(2), "BPort")]"#
        );
    }
}

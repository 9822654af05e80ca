//! Small glue between pb-rs messages and the blocking IPC client.

use std::os::fd::OwnedFd;

use quick_protobuf::{BytesReader, MessageRead, MessageWrite, Writer};

use crate::base::sock_addr::SockAddr;
use crate::ipc::client::{BlockingClient, BoundService, ClientError, ClientReply};

/// Serializes a pb-rs message.
pub fn encode<M: MessageWrite>(m: &M) -> Vec<u8> {
    let mut out = Vec::with_capacity(m.get_size());
    m.write_message(&mut Writer::new(&mut out))
        .expect("writing to a Vec cannot fail");
    out
}

/// Parses a reply to `method`; a malformed payload from the service is an
/// error. Its structure is checked first: quick-protobuf trusts nested
/// lengths.
pub fn decode<M: for<'a> MessageRead<'a>>(method: &str, bytes: &[u8]) -> Result<M, String> {
    crate::ipc::wire_check::check_method_reply(method, bytes)
        .map_err(|e| format!("malformed {method} reply from the service: {e}"))?;
    M::from_reader(&mut BytesReader::from_bytes(bytes), bytes)
        .map_err(|e| format!("malformed {method} reply from the service: {e}"))
}

/// A connection bound to one service.
pub struct Port {
    pub client: BlockingClient,
    pub service: BoundService,
}

impl Port {
    /// Connects to `socket` and binds `service`. The error text points
    /// users at tracebox, as upstream's does.
    pub fn connect(socket: &str, service: &str) -> Result<Port, String> {
        let hint = || {
            format!(
                "Could not connect to the traced socket {socket}. Ensure traced is running or use \
                 tracebox"
            )
        };
        let addr = SockAddr::parse(socket).map_err(|e| format!("{}: {e}", hint()))?;
        let mut client = BlockingClient::connect(&addr).map_err(|e| match e {
            ClientError::Io(e) if e.kind() == std::io::ErrorKind::PermissionDenied => format!(
                "Permission denied (EACCES) connecting to the traced socket {socket}: its owner, \
                 group and mode do not admit uid {} (run as root, or see traced \
                 --set-socket-permissions)",
                nix::unistd::getuid()
            ),
            _ => hint(),
        })?;
        let service = client
            .bind_service(service)
            .map_err(|e| format!("{}: {e}", hint()))?;
        Ok(Port { client, service })
    }

    /// Calls `method` and returns its single (or last) successful reply.
    pub fn call<Req: MessageWrite, Resp: for<'a> MessageRead<'a>>(
        &mut self,
        method: &str,
        req: &Req,
        fd: Option<OwnedFd>,
    ) -> Result<Resp, String> {
        let replies = self
            .client
            .invoke(&self.service, method, &encode(req), fd)
            .map_err(|e| format!("{method}: {e}"))?;
        match replies.last() {
            Some(ClientReply {
                success: true,
                payload,
                ..
            }) => decode(method, payload),
            _ => Err(format!("{method} failed")),
        }
    }

    /// Starts a call whose replies are read later with `next`.
    pub fn start<Req: MessageWrite>(
        &mut self,
        method: &str,
        req: &Req,
        fd: Option<OwnedFd>,
    ) -> Result<u64, String> {
        self.start_raw(method, encode(req), fd)
    }

    /// Like `start` with pre-encoded arguments.
    pub fn start_raw(
        &mut self,
        method: &str,
        args: Vec<u8>,
        fd: Option<OwnedFd>,
    ) -> Result<u64, String> {
        self.client
            .start_invoke(&self.service, method, &args, fd)
            .map_err(|e| format!("{method}: {e}"))
    }

    /// Next reply for `request_id`: Ok(None) when the stream ended,
    /// Err(TimedOut) when nothing came within the client's timeout.
    pub fn next(&mut self, request_id: u64) -> Result<Option<ClientReply>, ClientError> {
        self.client.next_reply(request_id)
    }
}

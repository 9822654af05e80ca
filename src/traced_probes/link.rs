//! The producer's side of the connection to traced, shared between the
//! event-loop handler and the SMB arbiter.
//!
//! The arbiter sends CommitData / RegisterTraceWriter from inside trace
//! writers (even while it stalls for a free chunk), so it must be able to
//! write to the socket directly; the handler owns the same [`Link`] for the
//! handshake and the command stream. Everything runs on the loop thread,
//! so the mutex is never contended; it only makes the sharing `Sync`.

use std::sync::{Arc, Mutex, MutexGuard};

use super::wire;
use crate::base::event_loop::{LoopCtl, Ready, Token};
use crate::ipc::client::{BoundService, Client, ClientError, ClientEvent};
use crate::tracing::core::arbiter::{BufferId, CommitBatch, ProducerTransport, WriterId};

/// ProducerPort methods we call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    InitializeConnection,
    RegisterDataSource,
    CommitData,
    GetAsyncCommand,
    RegisterTraceWriter,
    UnregisterTraceWriter,
    NotifyDataSourceStarted,
    NotifyDataSourceStopped,
    Sync,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::InitializeConnection => "InitializeConnection",
            Method::RegisterDataSource => "RegisterDataSource",
            Method::CommitData => "CommitData",
            Method::GetAsyncCommand => "GetAsyncCommand",
            Method::RegisterTraceWriter => "RegisterTraceWriter",
            Method::UnregisterTraceWriter => "UnregisterTraceWriter",
            Method::NotifyDataSourceStarted => "NotifyDataSourceStarted",
            Method::NotifyDataSourceStopped => "NotifyDataSourceStopped",
            Method::Sync => "Sync",
        }
    }
}

/// Connection state behind the mutex.
#[derive(Debug, Default)]
pub struct LinkState {
    client: Option<Client>,
    service: Option<BoundService>,
    /// Calls dropped because the connection was gone or the send failed.
    pub send_failures: u64,
    /// Under shared-memory emulation: our private SMB, whose chunks go
    /// inline in CommitData.
    pub emulated_smb: Option<crate::tracing::core::smb_abi::SmbAbi>,
    /// Chunks that could not be sent inline (not Complete).
    pub emulated_chunks_skipped: u64,
}

impl LinkState {
    pub fn set_client(&mut self, client: Client) {
        self.client = Some(client);
        self.service = None;
    }

    pub fn set_service(&mut self, service: BoundService) {
        self.service = Some(service);
    }

    pub fn clear(&mut self) {
        self.client = None;
        self.service = None;
    }

    pub fn token(&self) -> Option<Token> {
        self.client.as_ref().map(|c| c.token())
    }

    pub fn bind(&mut self) -> Result<u64, ClientError> {
        match &mut self.client {
            Some(c) => c.bind_service("ProducerPort"),
            None => Err(ClientError::Disconnected),
        }
    }

    /// Calls `method`; with `drop_reply` the service sends no answer.
    pub fn invoke(&mut self, method: Method, args: &[u8], drop_reply: bool) -> Option<u64> {
        let r = (|| {
            let service = self.service.as_ref().ok_or(ClientError::Disconnected)?;
            let id = service
                .method_id(method.name())
                .ok_or_else(|| ClientError::UnknownMethod(method.name().into()))?;
            let client = self.client.as_mut().ok_or(ClientError::Disconnected)?;
            client.invoke(service.service_id, id, args, None, drop_reply)
        })();
        match r {
            Ok(id) => Some(id),
            Err(e) => {
                self.send_failures += 1;
                if self.client.as_ref().is_some_and(|c| c.is_connected()) {
                    crate::log_warn!("{}: {e}", method.name());
                }
                None
            }
        }
    }

    pub fn on_io<M>(&mut self, ctl: &mut LoopCtl<'_, M>, ready: Ready, out: &mut Vec<ClientEvent>) {
        if let Some(c) = &mut self.client {
            c.on_io(ctl, ready, out);
        }
    }
}

/// Shared handle on the connection.
#[derive(Debug, Clone, Default)]
pub struct Link(Arc<Mutex<LinkState>>);

impl Link {
    pub fn lock(&self) -> MutexGuard<'_, LinkState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection's events for an I/O readiness on `token`; `None`
    /// if the token is not the connection's. The lock is released before
    /// the caller handles them (handlers commit through the link).
    pub fn events_for<M>(
        &self,
        ctl: &mut LoopCtl<'_, M>,
        token: Token,
        ready: Ready,
    ) -> Option<Vec<ClientEvent>> {
        let mut link = self.lock();
        if link.token() != Some(token) {
            return None;
        }
        let mut events = Vec::new();
        link.on_io(ctl, ready, &mut events);
        Some(events)
    }
}

/// The arbiter's way out: IPC calls on the shared link.
impl ProducerTransport for Link {
    fn commit_data(&self, batch: CommitBatch) {
        // The reply is an empty ack; nothing waits on it.
        let mut link = self.lock();
        let args = match &link.emulated_smb {
            Some(smb) => {
                let (args, skipped) = wire::commit_data_inline(&batch, smb);
                link.emulated_chunks_skipped += skipped;
                args
            }
            None => wire::commit_data(&batch),
        };
        link.invoke(Method::CommitData, &args, true);
    }

    fn register_trace_writer(&self, writer_id: WriterId, target_buffer: BufferId) {
        self.lock().invoke(
            Method::RegisterTraceWriter,
            &wire::register_trace_writer(writer_id, target_buffer),
            true,
        );
    }

    fn unregister_trace_writer(&self, writer_id: WriterId) {
        self.lock().invoke(
            Method::UnregisterTraceWriter,
            &wire::unregister_trace_writer(writer_id),
            true,
        );
    }
}

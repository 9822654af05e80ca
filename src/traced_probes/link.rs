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
    /// Scratch frame of the inline commits (kept: up to 128 KiB).
    frame: Vec<u8>,
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
        let r = self
            .target(method)
            .and_then(|(c, s, m)| c.invoke(s, m, args, None, drop_reply));
        self.sent(method, r)
    }

    /// The client and the service and method ids to call `method` with.
    fn target(&mut self, method: Method) -> Result<(&mut Client, u32, u32), ClientError> {
        let service = self.service.as_ref().ok_or(ClientError::Disconnected)?;
        let id = service
            .method_id(method.name())
            .ok_or_else(|| ClientError::UnknownMethod(method.name().into()))?;
        let service_id = service.service_id;
        let client = self.client.as_mut().ok_or(ClientError::Disconnected)?;
        Ok((client, service_id, id))
    }

    /// Counts (and logs, while connected) a failed call.
    fn sent(&mut self, method: Method, r: Result<u64, ClientError>) -> Option<u64> {
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

/// Bytes queued for traced past which an inline commit waits for the
/// socket: the emulated SMB frees its chunks as soon as they are framed,
/// so this queue, not the SMB, is what must push back on the writers.
const INLINE_QUEUE_HIGH: usize = 1 << 20;
/// Longest such wait per commit (traced or the relay may be gone; the
/// queue's own limit then turns further commits into counted failures).
const INLINE_QUEUE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl LinkState {
    /// Shared-memory emulation: the batch's chunks inline, a run of whole
    /// chunks per frame, each copied once from our SMB into the frame.
    fn commit_inline(&mut self, batch: &CommitBatch, smb: &crate::tracing::core::smb_abi::SmbAbi) {
        use super::inline_commit;
        let (mut chunks, skipped) = inline_commit::collect(batch, smb);
        self.emulated_chunks_skipped += skipped;
        let tail = wire::commit_data(&CommitBatch {
            chunks_to_move: Vec::new(),
            chunks_to_patch: batch.chunks_to_patch.clone(),
            flush_request_id: batch.flush_request_id,
        });
        let plan = inline_commit::frames(&chunks, tail.len());
        let last = plan.len().saturating_sub(1);
        let mut frame = std::mem::take(&mut self.frame);
        for (i, (range, len)) in plan.into_iter().enumerate() {
            let run = &chunks[range];
            let tail: &[u8] = if i == last { &tail } else { &[] };
            let sent = self.invoke_in_place(Method::CommitData, len, &mut frame, |out| {
                inline_commit::write_request(smb, run, tail, out)
            });
            if !sent {
                self.emulated_chunks_skipped += run.len() as u64;
            }
        }
        self.frame = frame;
        inline_commit::free(smb, chunks.drain(..));
        if let Some(c) = self.client.as_mut() {
            if c.queued_bytes() > INLINE_QUEUE_HIGH {
                let _ = c.drain_queue(INLINE_QUEUE_WAIT);
            }
        }
    }

    /// [`invoke`](Self::invoke) (with `drop_reply`) of `args_len` bytes of
    /// arguments `write` appends straight into `frame`; false if it failed
    /// (counted in `send_failures`).
    fn invoke_in_place(
        &mut self,
        method: Method,
        args_len: usize,
        frame: &mut Vec<u8>,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> bool {
        let r = self
            .target(method)
            .and_then(|(c, s, m)| c.invoke_in_place(s, m, args_len, frame, write));
        self.sent(method, r).is_some()
    }
}

/// The arbiter's way out: IPC calls on the shared link.
impl ProducerTransport for Link {
    fn commit_data(&self, batch: CommitBatch) {
        // The reply is an empty ack; nothing waits on it.
        let mut link = self.lock();
        match link.emulated_smb.clone() {
            Some(smb) => link.commit_inline(&batch, &smb),
            None => {
                link.invoke(Method::CommitData, &wire::commit_data(&batch), true);
            }
        }
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

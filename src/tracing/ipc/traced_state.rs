//! Glue between the IPC hosts and the sans-IO service core: which client
//! is which producer/consumer, pending deferred replies, SMB fds, output
//! files, and turning core [`Output`]s into IPC replies and file writes.

use std::collections::HashMap;

use crate::mem::small_map::SmallMap;
use std::fs::File;

use crate::base::shm::Shm;
use crate::ipc::host::{ClientId, Host, Reply, ReplySink, ReplyTo, REPLY_HEADER_MAX};
use crate::log_warn;
use crate::protozero::{put_bytes, put_str, put_varint, VecStream};
use crate::tracing::service::types::*;
use crate::tracing::service::{FrameSink, FrameWriter, TracingService, FRAME_HEAD_ROOM};

use super::env::{boot_time_ns, RealEnv, SmbTable};
use super::trace_file::TraceFile;

/// A producer connection.
#[derive(Default)]
pub struct ProducerConn {
    pub id: Option<ProducerId>,
    /// The GetAsyncCommand stream, once the producer opened it.
    pub async_reply: Option<ReplyTo>,
    /// Commands produced before the stream was open.
    pub queued: Vec<ProducerCommand>,
    /// A producer-provided SMB (kept mapped for the connection's life).
    pub provided_smb: Option<Shm>,
    /// A relayed producer: no fd reaches it, its chunks come inline in
    /// CommitData (upstream's shared-memory emulation).
    pub shmem_emulation: bool,
}

/// A consumer connection.
pub struct ConsumerConn {
    pub id: ConsumerId,
    /// The deferred EnableTracing reply.
    pub enable_reply: Option<ReplyTo>,
    pub observe_reply: Option<ReplyTo>,
}

pub struct TracedState {
    pub core: TracingService,
    pub smbs: SmbTable,
    pub producers: HashMap<ClientId, ProducerConn>,
    pub producer_clients: SmallMap<ProducerId, ClientId>,
    pub consumers: HashMap<ClientId, ConsumerConn>,
    pub consumer_clients: SmallMap<ConsumerId, ClientId>,
    /// Deferred Flush / CloneSession replies by token.
    pub pending: SmallMap<RequestToken, ReplyTo>,
    next_token: RequestToken,
    pub files: SmallMap<SessionId, TraceFile>,
    /// The finished output files of sessions that still exist, so a
    /// consumer that attaches later can read its trace back for the end
    /// line (one fd per live session at most).
    pub finished_files: SmallMap<SessionId, File>,
    /// Output files sent with CloneSession requests, by token, and why
    /// copying into one failed.
    pub clone_files: SmallMap<RequestToken, File>,
    clone_errors: SmallMap<RequestToken, String>,
    /// Files sent with RotateOutputFile requests, by token.
    pub rotate_files: SmallMap<RequestToken, File>,
    rotate_errors: SmallMap<RequestToken, String>,
    /// ReadBuffers streams in progress, fed as the consumer drains them.
    pub pending_reads: Vec<PendingRead>,
    /// RelayPort's id on the producer host, when exposed.
    pub relay_service: Option<crate::ipc::host::ServiceId>,
    /// This machine's name: local producers' machine in
    /// `machine_name_filter`.
    pub machine_name: String,
}

/// A ReadBuffers being streamed to a consumer.
#[derive(Debug)]
pub struct PendingRead {
    pub client: ClientId,
    pub consumer: ConsumerId,
    pub to: ReplyTo,
    /// The response being filled (kept across pauses).
    pub writer: FrameWriter,
}

impl PendingRead {
    pub fn new(client: ClientId, consumer: ConsumerId, to: ReplyTo) -> Self {
        PendingRead {
            client,
            consumer,
            to,
            writer: FrameWriter::new(),
        }
    }
}

/// Packet bytes read per ReadBuffers step before the event loop gets a
/// turn (the step also ends as soon as the consumer's socket is full).
const READ_STEP_BYTES: usize = 1 << 20;

const _: () = assert!(FRAME_HEAD_ROOM >= REPLY_HEADER_MAX);

/// Sends each response as it is completed, framed in place.
struct ToHost<'a> {
    host: &'a mut Host,
    to: ReplyTo,
}

impl FrameSink for ToHost<'_> {
    fn frame(&mut self, buf: &mut [u8], has_more: bool) -> bool {
        self.host
            .reply_in_place(&self.to, buf, FRAME_HEAD_ROOM, has_more)
    }
}

impl TracedState {
    /// Keeps a copy of a detached session's output file past its end,
    /// for the Attach to come; forgets the files of sessions that are gone.
    fn keep_finished_file(&mut self, sid: SessionId, f: &TraceFile) {
        let core = &self.core;
        self.finished_files
            .retain(|s, _| core.session_state(*s).is_some());
        if !core.session_is_detached(sid) {
            return;
        }
        if let Ok(dup) = f.file().try_clone() {
            self.finished_files.insert(sid, dup);
        }
    }

    /// The output file of `sid`, for a consumer that attached to it: the
    /// one being written, or the finished one (kept while the session
    /// lives: `--is_detached` attaches and detaches again).
    pub fn attached_file(&self, sid: SessionId) -> Option<File> {
        let open = self.files.get(&sid).map(TraceFile::file);
        let f = open.or_else(|| self.finished_files.get(&sid))?;
        f.try_clone().ok()
    }

    pub fn new(service_uid: u32) -> TracedState {
        let smbs = SmbTable::default();
        let env = RealEnv::new(smbs.clone());
        TracedState {
            core: TracingService::new(Box::new(env), service_uid),
            smbs,
            producers: HashMap::new(),
            producer_clients: SmallMap::new(),
            consumers: HashMap::new(),
            consumer_clients: SmallMap::new(),
            pending: SmallMap::new(),
            next_token: 1,
            files: SmallMap::new(),
            finished_files: SmallMap::new(),
            clone_files: SmallMap::new(),
            clone_errors: SmallMap::new(),
            rotate_files: SmallMap::new(),
            rotate_errors: SmallMap::new(),
            pending_reads: Vec::new(),
            relay_service: None,
            machine_name: super::env::machine_name(),
        }
    }

    pub fn now() -> u64 {
        boot_time_ns()
    }

    pub fn park(&mut self, to: ReplyTo) -> RequestToken {
        let t = self.next_token;
        self.next_token += 1;
        self.pending.insert(t, to);
        t
    }

    /// Sends one command on the producer's stream, or queues it.
    pub fn send_command(
        &mut self,
        producer: ProducerId,
        cmd: ProducerCommand,
        out: &mut dyn ReplySink,
    ) {
        let Some(client) = self.producer_clients.get(&producer).copied() else {
            return;
        };
        let Some(conn) = self.producers.get_mut(&client) else {
            return;
        };
        let Some(to) = conn.async_reply else {
            conn.queued.push(cmd);
            return;
        };
        let mut reply = Reply::more(cmd.encode());
        let emulated = conn.shmem_emulation;
        if emulated {
            // The producer keeps its own buffer; nothing to send.
        } else if let ProducerCommand::SetupTracing {
            service_created_smb: true,
            ..
        } = cmd
        {
            match self
                .smbs
                .borrow()
                .get(&producer)
                .map(|s| s.fd().try_clone_to_owned())
            {
                Some(Ok(fd)) => reply = reply.with_fd(fd),
                _ => log_warn!("traced: no SMB fd for producer {producer}"),
            }
        }
        out.reply(&to, reply);
    }

    /// Routes everything the core produced (including what it produces
    /// while this runs, e.g. after a failed file write).
    pub fn dispatch(&mut self, producers: &mut dyn ReplySink, consumers: &mut dyn ReplySink) {
        loop {
            let outputs = self.core.take_outputs();
            if outputs.is_empty() {
                return;
            }
            self.dispatch_some(outputs, producers, consumers);
        }
    }

    fn dispatch_some(
        &mut self,
        outputs: Vec<Output>,
        producers: &mut dyn ReplySink,
        consumers: &mut dyn ReplySink,
    ) {
        // Consumers whose queued TracingDisabled must carry a write error.
        let mut late_errors: Vec<(ConsumerId, String)> = Vec::new();
        for o in outputs {
            match o {
                Output::ProducerCommand { producer, cmd } => {
                    self.send_command(producer, cmd, producers)
                }
                Output::TracingDisabled { consumer, error } => {
                    let late = late_errors.iter().position(|e| e.0 == consumer);
                    let error = error.or_else(|| late.map(|i| late_errors.swap_remove(i).1));
                    let Some(conn) = self.consumer_conn(consumer) else {
                        continue;
                    };
                    let Some(to) = conn.enable_reply.take() else {
                        continue;
                    };
                    let mut s = VecStream::new();
                    put_varint(&mut s, 1, 1); // disabled
                    if let Some(e) = error {
                        put_str(&mut s, 3, &e);
                    }
                    consumers.reply(&to, Reply::ok(s.into_bytes()));
                }
                Output::FlushResult { token, success, .. } => {
                    if let Some(to) = self.pending.remove(&token) {
                        consumers.reply(
                            &to,
                            if success {
                                Reply::ok(Vec::new())
                            } else {
                                Reply::fail()
                            },
                        );
                    }
                }
                Output::CloneResult {
                    token, mut result, ..
                } => {
                    self.clone_files.remove(&token);
                    if let Some(e) = self.clone_errors.remove(&token) {
                        result = Err(e);
                    }
                    if let Some(to) = self.pending.remove(&token) {
                        consumers.reply(&to, Reply::ok(encode_clone_result(&result)));
                    }
                }
                Output::SyncFile { session } => {
                    if let Some(Err(e)) = self.files.get(&session).map(TraceFile::sync_data) {
                        log_warn!("traced: syncing the trace file failed: {e}");
                    }
                }
                Output::CopyFileForClone { token, from, to } => {
                    let copied = match (self.files.get(&from), self.clone_files.remove(&token)) {
                        (Some(src), Some(mut dst)) => {
                            super::clone_file::copy_contents(src.file(), src.committed(), &mut dst)
                                .map(|()| TraceFile::new(dst))
                                .map_err(|e| e.to_string())
                        }
                        (None, _) => Err("the session's file is already closed".into()),
                        (_, None) => Err("no file descriptor".into()),
                    };
                    match copied {
                        Ok(dst) => {
                            self.files.insert(to, dst);
                        }
                        Err(e) => {
                            let e = format!(
                                "Failed to clone 'write_into_file' session: failed to copy \
                                 existing file: {e}"
                            );
                            self.clone_errors.insert(token, e);
                        }
                    }
                }
                Output::WriteToFile { session, data } => {
                    if let Some(f) = self.files.get_mut(&session) {
                        if let Err(e) = f.append(&data) {
                            log_warn!("traced: writing the trace file failed: {e}");
                            if let Some(f) = self.files.remove(&session) {
                                self.keep_finished_file(session, &f);
                            }
                            let now = Self::now();
                            if let Some(c) = self.core.file_write_failed(now, session, e.clone()) {
                                late_errors.push((c, e));
                            }
                        }
                    }
                    self.core.recycle_file_buffer(data);
                }
                Output::CloseFile { session } => {
                    if let Some(f) = self.files.remove(&session) {
                        self.keep_finished_file(session, &f);
                        let _ = f.finish();
                    }
                }
                Output::SwitchFile { session, token } => {
                    let Some(new) = self.rotate_files.remove(&token) else {
                        self.rotate_errors
                            .insert(token, "no file descriptor".into());
                        continue;
                    };
                    let sync = self.core.session_syncs_file(session);
                    if let Some(old) = self.files.insert(session, TraceFile::new(new)) {
                        if sync {
                            if let Err(e) = old.finish() {
                                log_warn!("traced: syncing the rotated-out file failed: {e}");
                            }
                        }
                    }
                }
                Output::RotateResult {
                    token, mut result, ..
                } => {
                    self.rotate_files.remove(&token);
                    if let Some(e) = self.rotate_errors.remove(&token) {
                        result = Err(e);
                    }
                    if let Some(to) = self.pending.remove(&token) {
                        let mut s = VecStream::new();
                        match result {
                            Ok(()) => put_varint(&mut s, 1, 1),
                            Err(e) => {
                                put_varint(&mut s, 1, 0);
                                put_str(&mut s, 2, &e);
                            }
                        }
                        consumers.reply(&to, Reply::ok(s.into_bytes()));
                    }
                }
                Output::ObservableEvents { consumer, events } => {
                    let Some(to) = self.consumer_conn(consumer).and_then(|c| c.observe_reply)
                    else {
                        continue;
                    };
                    let mut s = VecStream::new();
                    put_bytes(&mut s, 1, &events);
                    consumers.reply(&to, Reply::more(s.into_bytes()));
                }
            }
        }
    }

    /// Feeds pending ReadBuffers streams while the consumers keep up:
    /// responses are encoded and written straight to the socket until it
    /// is full; the rest waits for the socket to drain (Host flushes, then
    /// the loop calls this again).
    pub fn pump_reads(&mut self, host: &mut Host) {
        let now = Self::now();
        let mut i = 0;
        while i < self.pending_reads.len() {
            let r = &mut self.pending_reads[i];
            let mut finished = false;
            while host.queued_bytes(r.client) == Some(0) {
                let mut sink = ToHost { host, to: r.to };
                let step = self.core.read_buffers_stream(
                    now,
                    r.consumer,
                    &mut r.writer,
                    &mut sink,
                    READ_STEP_BYTES,
                );
                match step {
                    Ok(false) => {}
                    Ok(true) => {
                        finished = true;
                        break;
                    }
                    Err(_) => {
                        host.reply(&r.to, Reply::fail());
                        finished = true;
                        break;
                    }
                }
            }
            if finished || host.queued_bytes(r.client).is_none() {
                self.pending_reads.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    fn consumer_conn(&mut self, consumer: ConsumerId) -> Option<&mut ConsumerConn> {
        let client = self.consumer_clients.get(&consumer)?;
        self.consumers.get_mut(client)
    }

    pub fn producer_gone(&mut self, client: ClientId) {
        let Some(conn) = self.producers.remove(&client) else {
            return;
        };
        if let Some(id) = conn.id {
            self.core.disconnect_producer(Self::now(), id);
            self.producer_clients.remove(&id);
            self.smbs.borrow_mut().remove(&id);
        }
    }

    pub fn consumer_gone(&mut self, client: ClientId) {
        self.pending_reads.retain(|r| r.client != client);
        let Some(conn) = self.consumers.remove(&client) else {
            return;
        };
        self.consumer_clients.remove(&conn.id);
        self.core.disconnect_consumer(Self::now(), conn.id);
        // The session it attached to may be gone with it: so is its file.
        let core = &self.core;
        self.finished_files
            .retain(|s, _| core.session_state(*s).is_some());
    }
}

/// Appends `data` (whole TracePackets) to the trace file. On a write error
/// (ENOSPC, EIO, EFBIG...) the file is cut back to the end of the last
/// packet that made it whole, so it still parses; the error names what
/// failed and where the file now ends.
fn encode_clone_result(r: &Result<CloneResult, String>) -> Vec<u8> {
    let mut s = VecStream::new();
    match r {
        Ok(c) => {
            put_varint(&mut s, 1, 1);
            put_varint(&mut s, 3, c.uuid_msb as u64);
            put_varint(&mut s, 4, c.uuid_lsb as u64);
            put_varint(&mut s, 5, c.was_write_into_file as u64);
        }
        Err(e) => {
            put_varint(&mut s, 1, 0);
            put_str(&mut s, 2, e);
        }
    }
    s.into_bytes()
}

//! The `ConsumerPort` IPC service (method ids = declaration order in
//! proto/ipc/consumer_port.proto).

use std::fs::File;
use std::os::fd::OwnedFd;

use quick_protobuf::{MessageWrite, Writer};

use crate::ipc::host::{Call, ClientId, Reply, ReplySink, Services};
use crate::pb::protos::mod_CloneSessionRequest::OneOfselector;
use crate::pb::protos::*;
use crate::protozero::decode::FieldIter;
use crate::protozero::{put_bytes, put_str, put_varint, VecStream};
use crate::schema::services::ConsumerPortCall;
use crate::tracing::service::session::ReceivedTrigger;
use crate::tracing::service::{CloneOptions, CloneSelector};

use super::traced_state::{ConsumerConn, PendingRead, TracedState};

/// Largest `service_state` chunk per QueryServiceState reply.
const STATE_CHUNK: usize = 64 * 1024;

pub struct ConsumerPort<'a>(pub &'a mut TracedState);

fn encode<M: MessageWrite>(m: &M) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = m.write_message(&mut Writer::new(&mut out));
    out
}

/// The raw bytes of field `n` (last occurrence) of a message.
fn raw_field(msg: &[u8], n: u32) -> Option<&[u8]> {
    FieldIter::new(msg)
        .filter(|f| f.number == n && f.wire_type == 2)
        .last()
        .map(|f| f.value)
}

/// RotateOutputFileResponse { success: false, error }.
fn rotate_error(e: &str) -> Reply {
    let mut s = VecStream::new();
    put_varint(&mut s, 1, 0);
    put_str(&mut s, 2, e);
    Reply::ok(s.into_bytes())
}

/// EnableTracingResponse { disabled: true, error }.
fn enable_error(e: &str) -> Reply {
    let mut s = VecStream::new();
    put_varint(&mut s, 1, 1);
    put_str(&mut s, 3, e);
    Reply::ok(s.into_bytes())
}

impl Services for ConsumerPort<'_> {
    fn invoke(&mut self, call: Call<'_>, out: &mut dyn ReplySink) {
        let request = match ConsumerPortCall::decode(call.method_name, &call.args) {
            Ok(r) => r,
            Err(e) => {
                crate::log_debug!("{}: {e}", call.method_name);
                out.reply(&call.reply_to, Reply::fail());
                return;
            }
        };
        let st = &mut *self.0;
        let now = TracedState::now();
        let to = call.reply_to;
        let client = call.client;
        if !st.consumers.contains_key(&client) {
            let id = st.core.connect_consumer(call.peer.uid);
            st.consumers.insert(
                client,
                ConsumerConn {
                    id,
                    enable_reply: None,
                    observe_reply: None,
                },
            );
            st.consumer_clients.insert(id, client);
        }
        let cid = st.consumers[&client].id;
        let args = &call.args[..];
        let ok = Reply::ok(Vec::new());
        let unit = |r: Result<(), String>| {
            if r.is_ok() {
                Reply::ok(Vec::new())
            } else {
                Reply::fail()
            }
        };
        let reply = match request {
            ConsumerPortCall::EnableTracing(r) => match enable_tracing(st, cid, r, args, call.fd) {
                Some(r) => r,
                None => {
                    st.consumers
                        .get_mut(&client)
                        .expect("inserted")
                        .enable_reply = Some(to);
                    return;
                }
            },
            ConsumerPortCall::DisableTracing(_) => unit(st.core.disable_tracing(now, cid)),
            // Streamed by TracedState::pump_reads as the consumer reads.
            ConsumerPortCall::ReadBuffers(_) => {
                st.pending_reads.push(PendingRead::new(client, cid, to));
                return;
            }
            ConsumerPortCall::FreeBuffers(_) => unit(st.core.free_buffers(now, cid)),
            ConsumerPortCall::Flush(r) => {
                let token = st.park(to);
                let (timeout, flags) = (r.timeout_ms.unwrap_or(0), r.flags.unwrap_or(0));
                if st.core.flush(now, cid, timeout, flags, token).is_ok() {
                    return;
                }
                st.pending.remove(&token);
                Reply::fail()
            }
            ConsumerPortCall::StartTracing(_) => unit(st.core.start_tracing(now, cid)),
            ConsumerPortCall::Detach(r) => {
                unit(st.core.detach(cid, r.key.as_deref().unwrap_or("")))
            }
            ConsumerPortCall::Attach(r) => {
                match st.core.attach(cid, r.key.as_deref().unwrap_or("")) {
                    Ok(cfg) => {
                        let mut s = VecStream::new();
                        put_bytes(&mut s, 1, &cfg);
                        let reply = Reply::ok(s.into_bytes());
                        // tracebox: the session's output file comes along,
                        // so the client can read it back for its end line
                        // (upstream's clients close an fd they did not ask
                        // for).
                        let file = st
                            .core
                            .consumer_session(cid)
                            .and_then(|sid| st.attached_file(sid));
                        match file {
                            Some(f) => reply.with_fd(OwnedFd::from(f)),
                            None => reply,
                        }
                    }
                    Err(_) => Reply::fail(),
                }
            }
            ConsumerPortCall::GetTraceStats(_) => match st.core.get_trace_stats(cid) {
                Ok(stats) => {
                    let mut s = VecStream::new();
                    put_bytes(&mut s, 1, &stats);
                    Reply::ok(s.into_bytes())
                }
                Err(_) => Reply::fail(),
            },
            ConsumerPortCall::ObserveEvents(r) => {
                let events = r.events_to_observe.iter();
                let mask = events.fold(0u32, |m, t| m | (*t as u32));
                let conn = st.consumers.get_mut(&client).expect("inserted");
                if let Some(old) = conn.observe_reply.take() {
                    out.reply(&old, Reply::ok(Vec::new()));
                }
                if mask == 0 {
                    st.core.observe_events(cid, 0);
                    ok
                } else {
                    conn.observe_reply = Some(to);
                    st.core.observe_events(cid, mask);
                    return;
                }
            }
            ConsumerPortCall::QueryServiceState(r) => {
                let sessions_only = r.sessions_only.unwrap_or(false);
                let state = encode(&st.core.query_service_state(cid, sessions_only));
                let chunks: Vec<&[u8]> = if state.is_empty() {
                    vec![&[]]
                } else {
                    state.chunks(STATE_CHUNK).collect()
                };
                let n = chunks.len();
                for (i, c) in chunks.into_iter().enumerate() {
                    let mut s = VecStream::new();
                    put_bytes(&mut s, 1, c);
                    let b = s.into_bytes();
                    out.reply(
                        &to,
                        if i + 1 == n {
                            Reply::ok(b)
                        } else {
                            Reply::more(b)
                        },
                    );
                }
                return;
            }
            ConsumerPortCall::QueryCapabilities(_) => {
                let mut s = VecStream::new();
                put_bytes(&mut s, 1, &encode(&st.core.query_capabilities()));
                Reply::ok(s.into_bytes())
            }
            ConsumerPortCall::SaveTraceForBugreport(_) => {
                let mut s = VecStream::new();
                put_varint(&mut s, 1, 0);
                put_str(&mut s, 2, "SaveTraceForBugreport is not supported");
                Reply::ok(s.into_bytes())
            }
            ConsumerPortCall::CloneSession(r) => {
                let selector = match r.selector {
                    OneOfselector::session_id(id) => CloneSelector::Id(id),
                    OneOfselector::unique_session_name(n) => CloneSelector::UniqueName(n),
                    OneOfselector::None => CloneSelector::Id(0),
                };
                let token = st.park(to);
                // Sent just in case (the client cannot know whether the
                // session writes into a file); used only if it does.
                let file = call.fd.map(File::from);
                let opts = CloneOptions {
                    with_file: file.is_some(),
                    trigger: r.clone_trigger_name.map(|name| ReceivedTrigger {
                        name,
                        producer_name: r.clone_trigger_producer_name.unwrap_or_default(),
                        producer_uid: r.clone_trigger_trusted_producer_uid.unwrap_or(0) as u32,
                        boot_time_ns: r.clone_trigger_boot_time_ns.unwrap_or(0),
                        stop_delay_ms: r.clone_trigger_delay_ms.unwrap_or(0) as u32,
                    }),
                };
                match st.core.clone_session(now, cid, selector, token, opts) {
                    Ok(()) => {
                        if let Some(f) = file {
                            st.clone_files.insert(token, f);
                        }
                        return;
                    }
                    Err(e) => {
                        st.pending.remove(&token);
                        let mut s = VecStream::new();
                        put_varint(&mut s, 1, 0);
                        put_str(&mut s, 2, &e);
                        Reply::ok(s.into_bytes())
                    }
                }
            }
            ConsumerPortCall::RotateOutputFile(r) if r.cut_failed.is_some() => {
                let reason = r.cut_failed.as_deref().unwrap_or("");
                match st.core.note_rotation_stopped(now, cid, reason) {
                    Ok(()) => {
                        let mut s = VecStream::new();
                        put_varint(&mut s, 1, 1);
                        Reply::ok(s.into_bytes())
                    }
                    Err(e) => rotate_error(&e),
                }
            }
            ConsumerPortCall::RotateOutputFile(_) => {
                let Some(file) = call.fd.map(File::from) else {
                    out.reply(
                        &to,
                        rotate_error("RotateOutputFile needs the new file's fd"),
                    );
                    return;
                };
                let token = st.park(to);
                match st.core.rotate_file(now, cid, token) {
                    Ok(()) => {
                        st.rotate_files.insert(token, file);
                        return;
                    }
                    Err(e) => {
                        st.pending.remove(&token);
                        rotate_error(&e)
                    }
                }
            }
            ConsumerPortCall::ChangeTraceConfig(_) => {
                let raw = raw_field(args, 1).unwrap_or(&[]);
                unit(st.core.change_trace_config(now, cid, raw))
            }
        };
        out.reply(&to, reply);
    }

    fn on_client_disconnected(&mut self, client: ClientId, _out: &mut dyn ReplySink) {
        self.0.consumer_gone(client);
    }
}

/// `None` = accepted, the reply is deferred until the session ends.
fn enable_tracing(
    st: &mut TracedState,
    cid: u64,
    req: EnableTracingRequest,
    args: &[u8],
    fd: Option<OwnedFd>,
) -> Option<Reply> {
    if req.attach_notification_only.unwrap_or(false) {
        return match st.core.enable_tracing_notification_only(cid) {
            Ok(()) => None,
            Err(e) => Some(enable_error(&e)),
        };
    }
    let raw = raw_field(args, 1).unwrap_or(&[]);
    let cfg = req.trace_config.unwrap_or_default();
    let mut file: Option<File> = fd.map(File::from);
    if cfg.write_into_file.unwrap_or(false) && file.is_none() {
        if let Some(path) = cfg.output_path.as_deref().filter(|p| !p.is_empty()) {
            use std::os::unix::fs::OpenOptionsExt;
            // Readable too: cloning the session copies the file.
            match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(path)
            {
                Ok(f) => file = Some(f),
                Err(e) => return Some(enable_error(&format!("Failed to create {path}: {e}"))),
            }
        }
    }
    match st
        .core
        .enable_tracing(TracedState::now(), cid, raw, file.is_some())
    {
        Ok(sid) => {
            if let (Some(f), true) = (file, cfg.write_into_file.unwrap_or(false)) {
                st.files.insert(sid, super::trace_file::TraceFile::new(f));
            }
            None
        }
        Err(e) => Some(enable_error(&e)),
    }
}

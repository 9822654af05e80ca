//! The `ConsumerPort` IPC service (method ids = declaration order in
//! proto/ipc/consumer_port.proto).

use std::fs::File;
use std::os::fd::OwnedFd;

use quick_protobuf::{MessageWrite, Writer};

use crate::ipc::host::{Call, ClientId, Reply, ReplySink, Services};
use crate::pb::protos::mod_CloneSessionRequest::OneOfselector;
use crate::pb::protos::*;
use crate::protozero::decode::{decode_message, FieldIter};
use crate::protozero::{put_bytes, put_str, put_varint, VecStream};
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

/// EnableTracingResponse { disabled: true, error }.
fn enable_error(e: &str) -> Reply {
    let mut s = VecStream::new();
    put_varint(&mut s, 1, 1);
    put_str(&mut s, 3, e);
    Reply::ok(s.into_bytes())
}

impl Services for ConsumerPort<'_> {
    fn invoke(&mut self, call: Call<'_>, out: &mut dyn ReplySink) {
        // quick-protobuf trusts nested lengths; check the framing of the
        // untrusted arguments against the schema before anything decodes them.
        if let Err(e) = crate::ipc::wire_check::check_method_args(call.method_name, &call.args) {
            crate::log_debug!("{}: malformed arguments: {e}", call.method_name);
            out.reply(&call.reply_to, Reply::fail());
            return;
        }
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
        let reply = match call.method_name {
            "EnableTracing" => match enable_tracing(st, cid, args, call.fd) {
                Some(r) => r,
                None => {
                    st.consumers
                        .get_mut(&client)
                        .expect("inserted")
                        .enable_reply = Some(to);
                    return;
                }
            },
            "DisableTracing" => unit(st.core.disable_tracing(now, cid)),
            // Streamed by TracedState::pump_reads as the consumer reads.
            "ReadBuffers" => {
                st.pending_reads.push(PendingRead::new(client, cid, to));
                return;
            }
            "FreeBuffers" => unit(st.core.free_buffers(now, cid)),
            "Flush" => match decode_message::<FlushRequest>(args) {
                Ok(r) => {
                    let token = st.park(to);
                    if st
                        .core
                        .flush(
                            now,
                            cid,
                            r.timeout_ms.unwrap_or(0),
                            r.flags.unwrap_or(0),
                            token,
                        )
                        .is_ok()
                    {
                        return;
                    }
                    st.pending.remove(&token);
                    Reply::fail()
                }
                Err(_) => Reply::fail(),
            },
            "StartTracing" => unit(st.core.start_tracing(now, cid)),
            "Detach" => match decode_message::<DetachRequest>(args) {
                Ok(r) => unit(st.core.detach(cid, r.key.as_deref().unwrap_or(""))),
                Err(_) => Reply::fail(),
            },
            "Attach" => match decode_message::<AttachRequest>(args) {
                Ok(r) => match st.core.attach(cid, r.key.as_deref().unwrap_or("")) {
                    Ok(cfg) => {
                        let mut s = VecStream::new();
                        put_bytes(&mut s, 1, &cfg);
                        Reply::ok(s.into_bytes())
                    }
                    Err(_) => Reply::fail(),
                },
                Err(_) => Reply::fail(),
            },
            "GetTraceStats" => match st.core.get_trace_stats(cid) {
                Ok(stats) => {
                    let mut s = VecStream::new();
                    put_bytes(&mut s, 1, &stats);
                    Reply::ok(s.into_bytes())
                }
                Err(_) => Reply::fail(),
            },
            "ObserveEvents" => match decode_message::<ObserveEventsRequest>(args) {
                Ok(r) => {
                    let mask = r
                        .events_to_observe
                        .iter()
                        .fold(0u32, |m, t| m | (*t as u32));
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
                Err(_) => Reply::fail(),
            },
            "QueryServiceState" => {
                let sessions_only = decode_message::<QueryServiceStateRequest>(args)
                    .ok()
                    .and_then(|r| r.sessions_only)
                    .unwrap_or(false);
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
            "QueryCapabilities" => {
                let mut s = VecStream::new();
                put_bytes(&mut s, 1, &encode(&st.core.query_capabilities()));
                Reply::ok(s.into_bytes())
            }
            "SaveTraceForBugreport" => {
                let mut s = VecStream::new();
                put_varint(&mut s, 1, 0);
                put_str(&mut s, 2, "SaveTraceForBugreport is not supported");
                Reply::ok(s.into_bytes())
            }
            "CloneSession" => match decode_message::<CloneSessionRequest>(args) {
                Ok(r) => {
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
                Err(_) => Reply::fail(),
            },
            "ChangeTraceConfig" => {
                let raw = raw_field(args, 1).unwrap_or(&[]);
                unit(st.core.change_trace_config(now, cid, raw))
            }
            _ => Reply::fail(),
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
    args: &[u8],
    fd: Option<OwnedFd>,
) -> Option<Reply> {
    let Ok(req) = decode_message::<EnableTracingRequest>(args) else {
        return Some(Reply::fail());
    };
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
                st.files.insert(sid, f);
            }
            None
        }
        Err(e) => Some(enable_error(&e)),
    }
}

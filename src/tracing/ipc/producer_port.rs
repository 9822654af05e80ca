//! The `ProducerPort` IPC service (method ids = declaration order in
//! proto/ipc/producer_port.proto).

use crate::base::shm::{AttachOptions, Shm};
use crate::ipc::host::{Call, ClientId, Reply, ReplySink, Services};
use crate::pb::protos::mod_InitializeConnectionRequest::ProducerSMBScrapingMode;
use crate::pb::protos::*;
use crate::protozero::{put_str, put_varint, VecStream};
use crate::schema::services::ProducerPortCall;
use crate::tracing::service::types::{ProducerInfo, ProvidedSmb};

use super::traced_state::{ProducerConn, TracedState};

/// Borrowed view of the state, implementing [`Services`] for the producer
/// sockets' host. Core outputs are dispatched by the caller afterwards.
pub struct ProducerPort<'a>(pub &'a mut TracedState);

impl Services for ProducerPort<'_> {
    fn invoke(&mut self, call: Call<'_>, out: &mut dyn ReplySink) {
        if Some(call.service) == self.0.relay_service {
            return super::relay_port::invoke(self.0, call, out);
        }
        let request = match ProducerPortCall::decode(call.method_name, &call.args) {
            Ok(r) => r,
            Err(e) => {
                crate::log_debug!("{}: {e}", call.method_name);
                out.reply(&call.reply_to, Reply::fail());
                return;
            }
        };
        let st = &mut *self.0;
        let now = TracedState::now();
        let client = call.client;
        let to = call.reply_to;
        let conn = st.producers.entry(client).or_default();
        let id = match (&request, conn.id) {
            (ProducerPortCall::InitializeConnection(_), _) => 0,
            (_, Some(id)) => id,
            (_, None) => {
                out.reply(&to, Reply::fail());
                return;
            }
        };
        let ok = Reply::ok(Vec::new());
        let core = &mut st.core;
        let reply = match request {
            ProducerPortCall::InitializeConnection(r) => {
                let remote = call.remote.map(|m| (m.machine_id_hint, m.machine_name));
                initialize(st, client, call.peer.uid, call.peer.pid, r, call.fd, remote)
            }
            ProducerPortCall::RegisterDataSource(r) => {
                let res = core.register_data_source(
                    now,
                    id,
                    r.data_source_descriptor.unwrap_or_default(),
                );
                let mut s = VecStream::new();
                if let Err(e) = res {
                    put_str(&mut s, 1, &e);
                }
                Reply::ok(s.into_bytes())
            }
            ProducerPortCall::UnregisterDataSource(r) => {
                core.unregister_data_source(now, id, r.data_source_name.as_deref().unwrap_or(""));
                ok
            }
            ProducerPortCall::UpdateDataSource(r) => {
                core.update_data_source(id, r.data_source_descriptor.unwrap_or_default());
                ok
            }
            ProducerPortCall::CommitData(r) => {
                core.commit_data(now, id, &r);
                ok
            }
            ProducerPortCall::GetAsyncCommand(_) => {
                let conn = st.producers.get_mut(&client).expect("inserted above");
                conn.async_reply = Some(to);
                let queued = std::mem::take(&mut conn.queued);
                st.core.on_producer_command_stream_open(id);
                for cmd in queued {
                    st.send_command(id, cmd, out);
                }
                return; // the stream stays open
            }
            ProducerPortCall::RegisterTraceWriter(r) => {
                let writer = r.trace_writer_id.unwrap_or(0);
                core.register_trace_writer(id, writer, r.target_buffer.unwrap_or(0));
                ok
            }
            ProducerPortCall::UnregisterTraceWriter(r) => {
                core.unregister_trace_writer(id, r.trace_writer_id.unwrap_or(0));
                ok
            }
            ProducerPortCall::NotifyDataSourceStarted(r) => {
                let ds = r.data_source_id.unwrap_or(0);
                core.notify_data_source_started(now, id, ds, &r.tracebox_setup_problems);
                ok
            }
            ProducerPortCall::NotifyDataSourceStopped(r) => {
                core.notify_data_source_stopped(now, id, r.data_source_id.unwrap_or(0));
                ok
            }
            ProducerPortCall::ActivateTriggers(r) => {
                core.activate_triggers(now, id, &r.trigger_names);
                ok
            }
            ProducerPortCall::Sync(_) => ok,
        };
        out.reply(&to, reply);
    }

    fn on_client_disconnected(&mut self, client: ClientId, _out: &mut dyn ReplySink) {
        self.0.producer_gone(client);
    }
}

fn initialize(
    st: &mut TracedState,
    client: ClientId,
    uid: u32,
    pid: i32,
    req: InitializeConnectionRequest,
    fd: Option<std::os::fd::OwnedFd>,
    remote_machine: Option<(String, String)>,
) -> Reply {
    // No fd reaches a relayed producer: chunks come inline.
    let shmem_emulation = remote_machine.is_some();
    if st.producers.get(&client).is_some_and(|c| c.id.is_some()) {
        return Reply::fail(); // InitializeConnection only once
    }
    let mut conn = ProducerConn {
        shmem_emulation,
        ..Default::default()
    };
    let mut provided = None;
    if let (Some(fd), true) = (fd, req.producer_provided_shmem.unwrap_or(false)) {
        match Shm::attach(
            fd,
            AttachOptions {
                require_seals: true,
                expected_size: None,
            },
        ) {
            Ok(shm) => {
                let page = req.shared_memory_page_size_hint_bytes.unwrap_or(0) as usize;
                let page = if page == 0 { 4096 } else { page };
                provided = Some(ProvidedSmb {
                    mem: std::sync::Arc::clone(shm.mem()),
                    page_size: page,
                });
                conn.provided_smb = Some(shm);
            }
            Err(e) => crate::log_warn!("traced: producer-provided SMB rejected: {e}"),
        }
    }
    let using_provided = provided.is_some();
    let info = ProducerInfo {
        uid,
        pid: (pid > 0).then_some(pid),
        name: req.producer_name.unwrap_or_default(),
        sdk_version: req.sdk_version.unwrap_or_default(),
        shm_size_hint_bytes: req.shared_memory_size_hint_bytes.unwrap_or(0) as u64,
        page_size_hint_bytes: req.shared_memory_page_size_hint_bytes.unwrap_or(0) as u64,
        smb_scraping_enabled: req.smb_scraping_mode
            == Some(ProducerSMBScrapingMode::SMB_SCRAPING_ENABLED),
        machine_name: match &remote_machine {
            Some(m) => m.1.clone(),
            None => st.machine_name.clone(),
        },
        machine_id_hint: remote_machine.map(|m| m.0),
    };
    match st.core.connect_producer(info, provided) {
        Ok(id) => {
            conn.id = Some(id);
            st.producers.insert(client, conn);
            st.producer_clients.insert(id, client);
            let mut s = VecStream::new();
            put_varint(&mut s, 1, using_provided as u64);
            put_varint(&mut s, 2, 1); // direct_smb_patching_supported
            if shmem_emulation {
                put_varint(&mut s, 3, 1); // use_shmem_emulation
            }
            Reply::ok(s.into_bytes())
        }
        Err(e) => {
            crate::log_warn!("traced: producer refused: {e}");
            Reply::fail()
        }
    }
}

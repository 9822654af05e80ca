//! Per-producer connection state kept by the service.

use crate::mem::small_map::SmallMap;
use std::collections::BTreeSet;

use crate::pb::protos::DataSourceDescriptor;
use crate::tracing::core::smb_abi::SmbAbi;

use super::trace_buffer::ClientIdentity;
use super::types::{BufferId, ProducerInfo};

#[derive(Debug)]
pub struct Producer {
    pub info: ProducerInfo,
    /// 0 on the host machine, else the id of its machine hint.
    pub machine_id: u32,
    /// Registered data sources by name (a name registered twice keeps the
    /// latest descriptor).
    pub data_sources: SmallMap<String, DataSourceDescriptor>,
    pub smb: Option<SmbAbi>,
    /// The SMB came from the producer (InitializeConnection fd).
    pub smb_provided: bool,
    /// SetupTracing was sent on this connection.
    pub setup_tracing_sent: bool,
    /// Buffers this producer may write into: those of sessions in which it
    /// has a data source instance.
    pub allowed_buffers: BTreeSet<BufferId>,
    /// RegisterTraceWriter bindings: writer id -> buffer.
    pub writers: SmallMap<u16, BufferId>,
    /// Protocol misuse not tied to a buffer (bad writer registration).
    pub abi_violations: u64,
    /// Shared-memory emulation: the last chunk id seen per writer, to
    /// notice chunks that never arrived.
    pub inline_chunk_ids: SmallMap<u16, u32>,
}

impl Producer {
    pub fn new(info: ProducerInfo) -> Self {
        Producer {
            info,
            machine_id: 0,
            data_sources: SmallMap::new(),
            smb: None,
            smb_provided: false,
            setup_tracing_sent: false,
            allowed_buffers: BTreeSet::new(),
            writers: SmallMap::new(),
            abi_violations: 0,
            inline_chunk_ids: SmallMap::new(),
        }
    }

    /// `name`, or `name on machine M` for a relayed producer.
    pub fn label(&self) -> String {
        match (self.machine_id, self.info.machine_name.as_str()) {
            (0, _) => self.info.name.clone(),
            (id, "") => format!("{} on machine {id}", self.info.name),
            (_, m) => format!("{} on machine {m}", self.info.name),
        }
    }

    pub fn client_identity(&self) -> ClientIdentity {
        ClientIdentity {
            uid: self.info.uid,
            pid: self.info.pid,
            machine_id: self.machine_id,
        }
    }
}

//! Identifiers, inputs and outputs of the sans-IO tracing service core.
//!
//! The core never talks to the OS: the adapter feeds it method calls with
//! an explicit `now` (boot clock, ns), drains [`Output`]s, and implements
//! [`ServiceEnv`] for the few things only the outside world knows (clocks,
//! randomness, system info, shared-memory creation).

use std::sync::Arc;

use crate::mem::shared_mem::SharedMem;
use crate::protozero::{begin_nested, end_nested, put_bytes, put_varint, Stream, VecStream};

/// Producer ids live in the 16-bit space the trace buffer records use.
pub type ProducerId = u16;
pub type ConsumerId = u64;
pub type SessionId = u64;
/// Global buffer id (what producers see as `target_buffer`).
pub type BufferId = u16;
pub type DataSourceInstanceId = u64;
pub type FlushRequestId = u64;
/// Opaque id the adapter attaches to a deferred consumer request.
pub type RequestToken = u64;

/// `BuiltinClock` ids used in clock snapshots.
pub const CLOCK_REALTIME: u32 = 1;
pub const CLOCK_MONOTONIC: u32 = 3;
pub const CLOCK_BOOTTIME: u32 = 6;

/// What the service knows about a producer connection (from the socket's
/// peer credentials and its InitializeConnection request).
#[derive(Debug, Clone, Default)]
pub struct ProducerInfo {
    pub uid: u32,
    pub pid: Option<i32>,
    pub name: String,
    pub sdk_version: String,
    pub shm_size_hint_bytes: u64,
    pub page_size_hint_bytes: u64,
    /// The producer asked for SMB scraping (see `scrape.rs`).
    pub smb_scraping_enabled: bool,
    /// A relayed producer's machine (SetPeerIdentity's hint); `None` on
    /// the host machine.
    pub machine_id_hint: Option<String>,
    /// The producer's machine name: SetPeerIdentity's for a relayed one,
    /// traced's own otherwise.
    pub machine_name: String,
}

/// An SMB the producer brought (InitializeConnection with an fd). The
/// adapter checks sealing and size before handing it over.
#[derive(Debug, Clone)]
pub struct ProvidedSmb {
    pub mem: Arc<SharedMem>,
    pub page_size: usize,
}

/// Services the adapter provides to the core.
pub trait ServiceEnv {
    /// Current readings of the clocks to snapshot, BOOTTIME first:
    /// `(BuiltinClock id, ns)`.
    fn clock_snapshot(&mut self) -> Vec<(u32, u64)>;
    /// An encoded `SystemInfo` message, if the platform has one.
    fn system_info(&mut self) -> Option<Vec<u8>>;
    /// Random bits (trace UUIDs).
    fn random_u64(&mut self) -> u64;
    /// Creates a shared-memory buffer for `producer`. The adapter keeps the
    /// fd and sends it with the producer's `SetupTracing` command.
    fn create_smb(
        &mut self,
        producer: ProducerId,
        size: usize,
        page_size: usize,
    ) -> Option<Arc<SharedMem>>;
}

/// Commands pushed to a producer on its GetAsyncCommand stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProducerCommand {
    /// The adapter attaches the SMB fd when `service_created_smb`.
    SetupTracing {
        page_size_kb: u32,
        service_created_smb: bool,
    },
    /// `config` is the raw DataSourceConfig (owned fields rewritten).
    SetupDataSource {
        instance_id: DataSourceInstanceId,
        config: Vec<u8>,
    },
    StartDataSource {
        instance_id: DataSourceInstanceId,
        config: Vec<u8>,
    },
    StopDataSource {
        instance_id: DataSourceInstanceId,
    },
    Flush {
        request_id: FlushRequestId,
        instance_ids: Vec<DataSourceInstanceId>,
        flags: u64,
    },
    ClearIncrementalState {
        instance_ids: Vec<DataSourceInstanceId>,
    },
}

impl ProducerCommand {
    /// Encodes as a `GetAsyncCommandResponse` message.
    pub fn encode(&self) -> Vec<u8> {
        let mut s = VecStream::new();
        match self {
            ProducerCommand::SetupTracing { page_size_kb, .. } => {
                let n = begin_nested(&mut s, 3);
                put_varint(&mut s, 1, *page_size_kb as u64);
                end_nested(&mut s, n);
            }
            ProducerCommand::SetupDataSource {
                instance_id,
                config,
            } => encode_ds(&mut s, 6, *instance_id, config),
            ProducerCommand::StartDataSource {
                instance_id,
                config,
            } => encode_ds(&mut s, 1, *instance_id, config),
            ProducerCommand::StopDataSource { instance_id } => {
                let n = begin_nested(&mut s, 2);
                put_varint(&mut s, 1, *instance_id);
                end_nested(&mut s, n);
            }
            ProducerCommand::Flush {
                request_id,
                instance_ids,
                flags,
            } => {
                let n = begin_nested(&mut s, 5);
                for id in instance_ids {
                    put_varint(&mut s, 1, *id);
                }
                put_varint(&mut s, 2, *request_id);
                put_varint(&mut s, 3, *flags);
                end_nested(&mut s, n);
            }
            ProducerCommand::ClearIncrementalState { instance_ids } => {
                let n = begin_nested(&mut s, 7);
                for id in instance_ids {
                    put_varint(&mut s, 1, *id);
                }
                end_nested(&mut s, n);
            }
        }
        s.into_bytes()
    }
}

fn encode_ds<S: Stream>(s: &mut S, field: u32, id: u64, config: &[u8]) {
    let n = begin_nested(s, field);
    put_varint(s, 1, id);
    put_bytes(s, 2, config);
    end_nested(s, n);
}

/// Result of a CloneSession request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloneResult {
    pub session: SessionId,
    pub uuid_msb: i64,
    pub uuid_lsb: i64,
    pub was_write_into_file: bool,
}

/// Everything the core asks the adapter to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    ProducerCommand {
        producer: ProducerId,
        cmd: ProducerCommand,
    },
    /// Completes the consumer's deferred EnableTracing request.
    TracingDisabled {
        consumer: ConsumerId,
        error: Option<String>,
    },
    FlushResult {
        consumer: ConsumerId,
        token: RequestToken,
        success: bool,
    },
    CloneResult {
        consumer: ConsumerId,
        token: RequestToken,
        result: Result<CloneResult, String>,
    },
    /// Append to the session's output file (already framed as `Trace`).
    WriteToFile { session: SessionId, data: Vec<u8> },
    /// The session is done with its output file.
    CloseFile { session: SessionId },
    /// `fflush_post_write`: sync the file to storage after a periodic write.
    SyncFile { session: SessionId },
    /// Cloning a write_into_file session: copy what `from`'s file holds
    /// into the file sent with clone request `token`, which becomes
    /// `to`'s output file (the clone's buffers are appended after it).
    CopyFileForClone {
        token: RequestToken,
        from: SessionId,
        to: SessionId,
    },
    /// Rotation: the file sent with rotate request `token` becomes the
    /// session's output file; the old one is complete.
    SwitchFile {
        session: SessionId,
        token: RequestToken,
    },
    RotateResult {
        consumer: ConsumerId,
        token: RequestToken,
        result: Result<(), String>,
    },
    /// An encoded `ObservableEvents` message for a subscribed consumer.
    ObservableEvents {
        consumer: ConsumerId,
        events: Vec<u8>,
    },
}

/// FlushFlags (bits 0-3 reason, 4-7 initiator).
pub mod flush_flags {
    pub const REASON_PERIODIC: u64 = 1;
    pub const REASON_TRACE_STOP: u64 = 2;
    pub const REASON_TRACE_CLONE: u64 = 3;
    pub const INITIATOR_TRACED: u64 = 1 << 4;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::protos::mod_GetAsyncCommandResponse::OneOfcmd;
    use crate::pb::protos::GetAsyncCommandResponse;

    #[test]
    fn commands_decode_as_get_async_command_response() {
        let cmd = ProducerCommand::Flush {
            request_id: 9,
            instance_ids: vec![1, 2],
            flags: 0x12,
        };
        let r: GetAsyncCommandResponse =
            crate::protozero::decode::decode_message(&cmd.encode()).unwrap();
        match r.cmd {
            OneOfcmd::flush(f) => {
                assert_eq!(f.data_source_ids, vec![1, 2]);
                assert_eq!(f.request_id, Some(9));
                assert_eq!(f.flags, Some(0x12));
            }
            other => panic!("{other:?}"),
        }
        let cmd = ProducerCommand::SetupTracing {
            page_size_kb: 4,
            service_created_smb: true,
        };
        let r: GetAsyncCommandResponse =
            crate::protozero::decode::decode_message(&cmd.encode()).unwrap();
        assert!(
            matches!(r.cmd, OneOfcmd::setup_tracing(t) if t.shared_buffer_page_size_kb == Some(4))
        );
    }
}

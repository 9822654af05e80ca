//! ProducerPort messages as traced_probes sends and receives them: request
//! encoding (pb-rs types, cold path) and decoding of the service's
//! GetAsyncCommand stream into [`Command`]s.
//!
//! Everything decoded here comes from the service; values are checked
//! before they leave this file (ids non-zero, buffers in u16 range).

use std::time::Duration;

use quick_protobuf::{BytesReader, MessageRead, MessageWrite, Writer};

use crate::pb::protos::mod_GetAsyncCommandResponse::OneOfcmd;
use crate::pb::protos::mod_InitializeConnectionRequest::ProducerSMBScrapingMode;
use crate::pb::protos::{
    DataSourceConfig, DataSourceDescriptor, GetAsyncCommandResponse, InitializeConnectionRequest,
    InitializeConnectionResponse, NotifyDataSourceStartedRequest, NotifyDataSourceStoppedRequest,
    RegisterDataSourceRequest, RegisterTraceWriterRequest, UnregisterTraceWriterRequest,
};
use crate::tracing::core::arbiter::{ArbiterConfig, BufferId, CommitBatch, WriterId};

/// Name traced_probes registers under (traced and tools match on it).
pub const PRODUCER_NAME: &str = "perfetto.traced_probes";
/// SMB hints: 2 MiB of 32 KiB pages, as upstream traced_probes asks.
pub const SMB_SIZE_HINT: u32 = 2 * 1024 * 1024;
pub const SMB_PAGE_SIZE_HINT: u32 = 32 * 1024;
/// Longest sleep of a writer waiting for a free chunk. The ftrace writer
/// stalls while traced is busy elsewhere; waking only every 100 ms (the
/// default, for apps) left the kernel buffers unread up to 100 ms past the
/// moment traced freed chunks (seen here: a 153 ms drain, then overrun).
const STALL_SLEEP_CAP: Duration = Duration::from_millis(1);
/// Total stall before giving up, as the default (300 x 100 ms): ~30 s.
const STALL_ATTEMPTS: u32 = 30_000;

/// The SMB arbiter's settings for traced_probes.
pub fn arbiter_config() -> ArbiterConfig {
    ArbiterConfig {
        max_stall_sleep: STALL_SLEEP_CAP,
        max_stall_attempts: STALL_ATTEMPTS,
        ..ArbiterConfig::default()
    }
}

/// Serializes a pb-rs message.
pub fn encode<M: MessageWrite>(m: &M) -> Vec<u8> {
    let mut out = Vec::with_capacity(m.get_size());
    // Writing into a Vec cannot fail.
    let _ = m.write_message(&mut Writer::new(&mut out));
    out
}

/// Parses a message we wrote (or a test did).
pub fn decode<M: for<'a> MessageRead<'a>>(bytes: &[u8]) -> Option<M> {
    M::from_reader(&mut BytesReader::from_bytes(bytes), bytes).ok()
}

/// Parses traced's reply to `method` after checking its structure
/// (quick-protobuf trusts nested lengths; a hostile length must not
/// panic us).
fn decode_reply<M: for<'a> MessageRead<'a>>(method: &str, reply_untrusted: &[u8]) -> Option<M> {
    crate::ipc::wire_check::check_method_reply(method, reply_untrusted).ok()?;
    decode(reply_untrusted)
}

pub fn initialize_connection(producer_name: &str) -> Vec<u8> {
    encode(&InitializeConnectionRequest {
        shared_memory_page_size_hint_bytes: Some(SMB_PAGE_SIZE_HINT),
        shared_memory_size_hint_bytes: Some(SMB_SIZE_HINT),
        producer_name: Some(producer_name.to_string()),
        smb_scraping_mode: Some(ProducerSMBScrapingMode::SMB_SCRAPING_DISABLED),
        sdk_version: Some(crate::VERSION.to_string()),
        ..Default::default()
    })
}

/// `direct_smb_patching_supported` from the InitializeConnection reply.
pub fn direct_patching_supported(reply: &[u8]) -> bool {
    decode_reply::<InitializeConnectionResponse>("InitializeConnection", reply)
        .and_then(|r| r.direct_smb_patching_supported)
        .unwrap_or(false)
}

/// `use_shmem_emulation` from the InitializeConnection reply: traced
/// cannot share memory with us (we reach it through a relay).
pub fn shmem_emulation(reply: &[u8]) -> bool {
    decode_reply::<InitializeConnectionResponse>("InitializeConnection", reply)
        .and_then(|r| r.use_shmem_emulation)
        .unwrap_or(false)
}

/// RegisterDataSource for one of our sources: every one acks start and stop.
pub fn register_data_source(name: &str) -> Vec<u8> {
    encode(&RegisterDataSourceRequest {
        data_source_descriptor: Some(DataSourceDescriptor {
            name: Some(name.to_string()),
            will_notify_on_start: Some(true),
            will_notify_on_stop: Some(true),
            handles_incremental_state_clear: Some(true),
            ..Default::default()
        }),
    })
}

pub fn register_trace_writer(id: WriterId, target_buffer: BufferId) -> Vec<u8> {
    encode(&RegisterTraceWriterRequest {
        trace_writer_id: Some(id as u32),
        target_buffer: Some(target_buffer as u32),
    })
}

pub fn unregister_trace_writer(id: WriterId) -> Vec<u8> {
    encode(&UnregisterTraceWriterRequest {
        trace_writer_id: Some(id as u32),
    })
}

/// `problems`: what its setup could not give as asked (a tracebox
/// extension field; a Perfetto traced skips it).
pub fn notify_started(instance: u64, problems: &[String]) -> Vec<u8> {
    encode(&NotifyDataSourceStartedRequest {
        data_source_id: Some(instance),
        tracebox_setup_problems: problems.to_vec(),
    })
}

pub fn notify_stopped(instance: u64) -> Vec<u8> {
    encode(&NotifyDataSourceStoppedRequest {
        data_source_id: Some(instance),
    })
}

/// The arbiter's batch as a CommitDataRequest (hand-encoded: the hottest
/// request we send, and the pb-rs structs cost ~2 KB of code for it).
pub fn commit_data(batch: &CommitBatch) -> Vec<u8> {
    use crate::protozero::{begin_nested, end_nested, put_bytes, put_varint, VecStream};
    let mut s = VecStream::new();
    for c in &batch.chunks_to_move {
        let m = begin_nested(&mut s, 1); // chunks_to_move
        put_varint(&mut s, 1, c.page.into());
        put_varint(&mut s, 2, c.chunk.into());
        put_varint(&mut s, 3, c.target_buffer.into());
        end_nested(&mut s, m);
    }
    for c in &batch.chunks_to_patch {
        let m = begin_nested(&mut s, 2); // chunks_to_patch
        put_varint(&mut s, 1, c.target_buffer.into());
        put_varint(&mut s, 2, c.writer_id.into());
        put_varint(&mut s, 3, c.chunk_id.into());
        for p in &c.patches {
            let n = begin_nested(&mut s, 4); // patches
            put_varint(&mut s, 1, p.offset.into());
            put_bytes(&mut s, 2, &p.data);
            end_nested(&mut s, n);
        }
        if c.has_more_patches {
            put_varint(&mut s, 5, 1);
        }
        end_nested(&mut s, m);
    }
    if let Some(id) = batch.flush_request_id {
        put_varint(&mut s, 3, id);
    }
    s.into_bytes()
}

/// One command pushed by the service on the GetAsyncCommand stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// The SMB fd rides on the same reply frame.
    SetupTracing {
        page_size_kb: u32,
    },
    SetupDataSource {
        id: u64,
        config: DataSourceConfig,
    },
    StartDataSource {
        id: u64,
        config: DataSourceConfig,
    },
    StopDataSource {
        id: u64,
    },
    Flush {
        ids: Vec<u64>,
        request_id: u64,
        /// The trace is stopping (FlushFlags reason "trace stop"): the
        /// last flush before StopDataSource.
        stopping: bool,
    },
    ClearIncrementalState {
        ids: Vec<u64>,
    },
}

/// Why a command was ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandError {
    Malformed,
    /// A oneof member we do not know (newer service) or none at all.
    Unknown,
    MissingId,
}

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CommandError::Malformed => "malformed",
            CommandError::Unknown => "unknown or empty command",
            CommandError::MissingId => "no data source id",
        })
    }
}

fn config_ok(config_untrusted: Option<DataSourceConfig>) -> DataSourceConfig {
    config_untrusted.unwrap_or_default()
}

/// FlushFlags: the reason is in bits 0-3; 2 is "trace stop".
const FLUSH_REASON_MASK: u64 = 0xf;
const FLUSH_REASON_TRACE_STOP: u64 = 2;

/// Decodes one GetAsyncCommandResponse payload.
pub fn parse_command(payload_untrusted: &[u8]) -> Result<Command, CommandError> {
    let msg: GetAsyncCommandResponse =
        decode_reply("GetAsyncCommand", payload_untrusted).ok_or(CommandError::Malformed)?;
    let nonzero = |id: Option<u64>| id.filter(|&i| i != 0).ok_or(CommandError::MissingId);
    Ok(match msg.cmd {
        OneOfcmd::setup_tracing(s) => Command::SetupTracing {
            page_size_kb: s.shared_buffer_page_size_kb.unwrap_or(0),
        },
        OneOfcmd::setup_data_source(s) => Command::SetupDataSource {
            id: nonzero(s.new_instance_id)?,
            config: config_ok(s.config),
        },
        OneOfcmd::start_data_source(s) => Command::StartDataSource {
            id: nonzero(s.new_instance_id)?,
            config: config_ok(s.config),
        },
        OneOfcmd::stop_data_source(s) => Command::StopDataSource {
            id: nonzero(s.instance_id)?,
        },
        OneOfcmd::flush(f) => Command::Flush {
            ids: f.data_source_ids,
            request_id: f.request_id.unwrap_or(0),
            stopping: f.flags.unwrap_or(0) & FLUSH_REASON_MASK == FLUSH_REASON_TRACE_STOP,
        },
        OneOfcmd::clear_incremental_state(c) => Command::ClearIncrementalState {
            ids: c.data_source_ids,
        },
        OneOfcmd::None => return Err(CommandError::Unknown),
    })
}

/// The target buffer of a data source config, if it fits the u16 id space.
pub fn target_buffer(config: &DataSourceConfig) -> Option<BufferId> {
    config
        .target_buffer
        .and_then(|b| BufferId::try_from(b).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::protos::mod_GetAsyncCommandResponse::{Flush, SetupDataSource, StopDataSource};
    use crate::pb::protos::CommitDataRequest;
    use crate::tracing::core::arbiter::{ChunkToMove, ChunkToPatch, Patch};

    #[test]
    fn commands_round_trip_and_bad_input_is_refused() {
        let setup = GetAsyncCommandResponse {
            cmd: OneOfcmd::setup_data_source(SetupDataSource {
                new_instance_id: Some(7),
                config: Some(DataSourceConfig {
                    name: Some("linux.sys_stats".into()),
                    target_buffer: Some(3),
                    ..Default::default()
                }),
            }),
        };
        match parse_command(&encode(&setup)).unwrap() {
            Command::SetupDataSource { id, config } => {
                assert_eq!(id, 7);
                assert_eq!(target_buffer(&config), Some(3));
            }
            other => panic!("{other:?}"),
        }
        let flush = GetAsyncCommandResponse {
            cmd: OneOfcmd::flush(Flush {
                data_source_ids: vec![1, 2],
                request_id: Some(9),
                flags: None,
            }),
        };
        assert_eq!(
            parse_command(&encode(&flush)).unwrap(),
            Command::Flush {
                ids: vec![1, 2],
                request_id: 9,
                stopping: false,
            }
        );
        // Reason "trace stop" (initiator bits above it do not matter).
        let stop_flush = GetAsyncCommandResponse {
            cmd: OneOfcmd::flush(Flush {
                data_source_ids: vec![3],
                request_id: Some(4),
                flags: Some(2 | (1 << 4)),
            }),
        };
        assert!(matches!(
            parse_command(&encode(&stop_flush)).unwrap(),
            Command::Flush { stopping: true, .. }
        ));
        let stop0 = GetAsyncCommandResponse {
            cmd: OneOfcmd::stop_data_source(StopDataSource {
                instance_id: Some(0),
            }),
        };
        assert_eq!(parse_command(&encode(&stop0)), Err(CommandError::MissingId));
        assert_eq!(parse_command(&[]), Err(CommandError::Unknown));
        assert_eq!(
            parse_command(&[0x1a, 0x7f, 0x01]),
            Err(CommandError::Malformed)
        );
        // Found by the probes_commands fuzz target: setup_data_source whose
        // nested config length runs past its parent. quick-protobuf alone
        // panicked on it (subtract with overflow).
        let nested_overrun = [
            0x32, 0x14, 0x00, 0xf9, 0xed, 0xef, 0x01, 0xf5, 0x26, 0x78, 0x2e, 0x66, 0x00, 0x2a,
            0x04, 0x08, 0x00, 0x00, 0x65, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
            0x10, 0x03,
        ];
        assert_eq!(parse_command(&nested_overrun), Err(CommandError::Malformed));
        let huge = DataSourceConfig {
            target_buffer: Some(70000),
            ..Default::default()
        };
        assert_eq!(target_buffer(&huge), None);
    }

    #[test]
    fn commit_batch_encoding() {
        let batch = CommitBatch {
            chunks_to_move: vec![ChunkToMove {
                page: 2,
                chunk: 0,
                target_buffer: 5,
            }],
            chunks_to_patch: vec![ChunkToPatch {
                target_buffer: 5,
                writer_id: 1,
                chunk_id: 4,
                patches: vec![Patch {
                    offset: 8,
                    data: [1, 2, 3, 4],
                }],
                has_more_patches: false,
            }],
            flush_request_id: Some(11),
        };
        let req: CommitDataRequest = decode(&commit_data(&batch)).unwrap();
        assert_eq!(req.chunks_to_move[0].page, Some(2));
        assert_eq!(req.chunks_to_move[0].target_buffer, Some(5));
        assert_eq!(
            req.chunks_to_patch[0].patches[0].data,
            Some(vec![1, 2, 3, 4])
        );
        assert_eq!(req.chunks_to_move[0].chunk, Some(0));
        assert_eq!(req.chunks_to_patch[0].writer_id, Some(1));
        assert_eq!(req.chunks_to_patch[0].chunk_id, Some(4));
        assert_eq!(req.chunks_to_patch[0].patches[0].offset, Some(8));
        assert_eq!(req.chunks_to_patch[0].has_more_patches, None);
        assert_eq!(req.flush_request_id, Some(11));
        let more = CommitBatch {
            chunks_to_move: Vec::new(),
            chunks_to_patch: vec![ChunkToPatch {
                has_more_patches: true,
                ..batch.chunks_to_patch[0].clone()
            }],
            flush_request_id: None,
        };
        let req: CommitDataRequest = decode(&commit_data(&more)).unwrap();
        assert_eq!(req.chunks_to_patch[0].has_more_patches, Some(true));
        assert!(req.chunks_to_move.is_empty() && req.flush_request_id.is_none());
        assert!(commit_data(&CommitBatch::default()).is_empty());
    }
}

//! Producer/service shared code. No I/O here.
//!
//! * [`smb_abi`]: the shared-memory buffer layout and its state machine,
//!   including the service-side readers for untrusted SMBs.
//! * [`shared_mem`]: the only wrapper that touches SMB memory.
//! * [`chunk_reader`]: splits chunk payloads into fragments (untrusted input).
//! * [`arbiter`]: producer-side chunk allocation and commit batching.
//! * [`trace_writer`]: one packet sequence writing into SMB chunks.
//! * [`patch_list`]: a writer's size fields awaiting out-of-band patches.
pub mod arbiter;
pub mod chunk_reader;
pub mod patch_list;
pub mod shared_mem;
pub mod smb_abi;
pub mod trace_writer;

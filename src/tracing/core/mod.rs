//! Producer/service shared code. No I/O here.
//!
//! * [`smb_abi`]: the shared-memory buffer layout, its state machine and
//!   [`smb_abi::SmbAbi`] (defined in `smb_pages.rs`), including the
//!   service-side readers for untrusted SMBs; SMB size rules.
//! * `crate::mem::shared_mem`: the only wrapper that touches SMB memory.
//! * [`chunk_reader`]: splits chunk payloads into fragments (untrusted input).
//! * [`arbiter`]: producer-side chunk allocation and commit batching.
//! * [`commit_batch`]: what a commit tells the service, and the transport trait.
//! * [`trace_writer`]: one packet sequence writing into SMB chunks.
//! * [`patch_list`]: a writer's size fields awaiting out-of-band patches.
//!
//! # Producer and service in one picture
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use tracebox::protozero::{begin_nested, end_nested, put_str, put_varint};
//! use tracebox::tracing::core::arbiter::*;
//! use tracebox::tracing::core::chunk_reader::{Fragment, FragmentIter};
//! use tracebox::mem::shared_mem::SharedMem;
//! use tracebox::tracing::core::smb_abi::SmbAbi;
//!
//! // The service side of CommitData: copy each committed chunk, free it.
//! struct Service { abi: SmbAbi, fragments: Mutex<Vec<Vec<u8>>> }
//! impl ProducerTransport for Service {
//!     fn commit_data(&self, batch: CommitBatch) {
//!         for m in &batch.chunks_to_move {
//!             // Indices come from the producer: checked, errors not panics.
//!             let Ok(chunk) = self.abi.try_acquire_chunk_for_reading(m.page as usize, m.chunk as usize)
//!             else { continue };
//!             let mut payload = Vec::new();
//!             let header = self.abi.read_chunk(&chunk, &mut payload);
//!             self.abi.release_chunk_as_free(chunk).unwrap();
//!             for f in FragmentIter::new(&payload, header.packet_count) {
//!                 if let Ok(Fragment::Data(d)) = f {
//!                     if !d.is_empty() { self.fragments.lock().unwrap().push(d.to_vec()) }
//!                 }
//!             }
//!         }
//!     }
//!     fn register_trace_writer(&self, _: WriterId, _: BufferId) {}
//!     fn unregister_trace_writer(&self, _: WriterId) {}
//! }
//!
//! // In a real producer the SMB comes from `base::shm::Shm::attach`.
//! let abi = SmbAbi::new(Arc::new(SharedMem::new_heap(64 * 1024).unwrap()), 4096).unwrap();
//! let service = Arc::new(Service { abi: abi.clone(), fragments: Mutex::new(Vec::new()) });
//! let arbiter = Arbiter::new(abi, ArbiterConfig::default(), service.clone());
//! let mut writer = arbiter.create_trace_writer(1, BufferExhaustedPolicy::Drop).unwrap();
//! writer.set_emit_sequence_markers(false);
//! {
//!     let mut packet = writer.new_packet();          // a protozero Stream
//!     put_varint(&mut packet, 8, 1234);               // timestamp
//!     let n = begin_nested(&mut packet, 36);          // for_testing
//!     put_str(&mut packet, 1, "hello");
//!     end_nested(&mut packet, n);
//! }                                                   // packet ends here
//! writer.flush();
//! assert_eq!(service.fragments.lock().unwrap()[0][..3], [0x40, 0xd2, 0x09]);
//! ```
pub mod arbiter;
pub mod chunk_reader;
pub mod commit_batch;
pub mod patch_list;
pub mod smb_abi;
mod smb_pages;
pub mod trace_writer;
mod writer_ids;

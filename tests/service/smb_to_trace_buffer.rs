//! Our TraceWriter feeding the service's real TraceBuffer through the SMB:
//! CommitData moves are copied with `copy_chunk_untrusted`, patches applied
//! with `try_patch_chunk_contents`, packets read back and compared with the
//! same messages encoded into a Vec.

use crate::support::common;

use std::sync::{Arc, Mutex};

use common::gen::{gen_message, packet_budget, Rng};
use tracebox::mem::shared_mem::SharedMem;
use tracebox::protozero::VecStream;
use tracebox::tracing::core::arbiter::{
    Arbiter, ArbiterConfig, BufferExhaustedPolicy, BufferId, CommitBatch, ProducerTransport,
    WriterId,
};
use tracebox::tracing::core::smb_abi::{PageLayout, SmbAbi};
use tracebox::tracing::service::trace_buffer::{
    ClientIdentity, OverwritePolicy, Patch, TraceBuffer,
};

const PRODUCER_ID: u16 = 3;

struct BufferService {
    abi: SmbAbi,
    buffer: Mutex<TraceBuffer>,
}

impl ProducerTransport for BufferService {
    fn commit_data(&self, batch: CommitBatch) {
        let mut buf = self.buffer.lock().unwrap();
        let mut payload = Vec::new();
        for m in &batch.chunks_to_move {
            let c = self
                .abi
                .try_acquire_chunk_for_reading(m.page as usize, m.chunk as usize)
                .unwrap();
            payload.clear();
            let h = self.abi.read_chunk(&c, &mut payload);
            self.abi.release_chunk_as_free(c).unwrap();
            buf.copy_chunk_untrusted(
                PRODUCER_ID,
                ClientIdentity::default(),
                h.writer_id,
                h.chunk_id,
                h.packet_count,
                h.flags,
                true,
                &payload,
            );
        }
        for p in &batch.chunks_to_patch {
            let patches: Vec<Patch> = p
                .patches
                .iter()
                .map(|x| Patch {
                    offset_untrusted: x.offset,
                    data: x.data,
                })
                .collect();
            assert!(buf.try_patch_chunk_contents(
                PRODUCER_ID,
                p.writer_id,
                p.chunk_id,
                &patches,
                p.has_more_patches
            ));
        }
    }
    fn register_trace_writer(&self, _: WriterId, _: BufferId) {}
    fn unregister_trace_writer(&self, _: WriterId) {}
}

#[test]
fn writer_output_reads_back_from_the_service_trace_buffer() {
    for (seed, page_size, layout, direct) in [
        (1u64, 4096, PageLayout::Div1, false),
        (2, 4096, PageLayout::Div4, true),
        (3, 32768, PageLayout::Div1, false),
    ] {
        let abi = SmbAbi::new(
            Arc::new(SharedMem::new_heap(128 * 1024).unwrap()),
            page_size,
        )
        .unwrap();
        let service = Arc::new(BufferService {
            abi: abi.clone(),
            buffer: Mutex::new(TraceBuffer::new(64 << 20, OverwritePolicy::Discard).unwrap()),
        });
        let cfg = ArbiterConfig {
            page_layout: layout,
            batch_commits: direct,
            ..Default::default()
        };
        let arbiter = Arbiter::new(abi, cfg, service.clone());
        arbiter.set_direct_smb_patching(direct);
        let mut w = arbiter
            .create_trace_writer(1, BufferExhaustedPolicy::Stall)
            .unwrap();
        w.set_emit_sequence_markers(false);

        let mut rng = Rng::new(seed);
        let mut expected = Vec::new();
        for _ in 0..80 {
            let mut replay = rng.clone();
            let budget = packet_budget(&mut rng);
            let mut v = VecStream::new();
            gen_message(&mut rng, &mut v, budget, 0);
            let budget = packet_budget(&mut replay);
            gen_message(&mut replay, &mut w.new_packet(), budget, 0);
            if !v.as_bytes().is_empty() {
                expected.push(v.into_bytes());
            }
        }
        w.flush();

        let mut buf = service.buffer.lock().unwrap();
        buf.begin_read();
        let mut got = Vec::new();
        while let Some((packet, info)) = buf.read_next_trace_packet() {
            assert_eq!(
                (info.producer_id, info.writer_id),
                (PRODUCER_ID, w.writer_id())
            );
            got.push(packet.to_vec());
        }
        assert_eq!(got.len(), expected.len(), "seed {seed}");
        assert!(got == expected, "seed {seed}: packets differ");
        assert_eq!(buf.stats().abi_violations, 0);
    }
}

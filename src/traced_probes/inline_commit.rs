//! Shared-memory emulation, producer side: behind a relay traced cannot
//! map our buffer, so each Complete chunk of our private SMB travels inline
//! in CommitData (`ChunksToMove.data` = the 8-byte header, then the
//! payload) and is freed here.
//!
//! A batch goes out as few frames as fit the IPC limit
//! ([`MAX_COMMIT_REQUEST_BYTES`] of arguments each: a run of whole chunks
//! per frame), and each chunk is copied once, from the SMB straight into
//! the frame. Patches and the flush ack ride in the last frame, after every
//! chunk they may refer to.

use std::ops::Range;

use crate::ipc::frame::push_varint;
use crate::protozero::varint_len;
use crate::tracing::core::arbiter::CommitBatch;
use crate::tracing::core::commit_batch::MAX_COMMIT_REQUEST_BYTES;
use crate::tracing::core::smb_abi::{Chunk, ChunkHeader, ChunkState, SmbAbi, CHUNK_HEADER_SIZE};

/// One Complete chunk to send, with the bytes its entry takes.
#[derive(Debug)]
pub struct InlineChunk {
    chunk: Chunk,
    header: ChunkHeader,
    target_buffer: u32,
}

impl InlineChunk {
    fn data_len(&self) -> usize {
        CHUNK_HEADER_SIZE + self.chunk.payload_size()
    }

    fn body_len(&self) -> usize {
        let data = self.data_len();
        1 + varint_len(self.target_buffer.into()) + 1 + varint_len(data as u64) + data
    }

    /// Bytes of its `chunks_to_move` entry (tag, length, body).
    fn entry_len(&self) -> usize {
        let body = self.body_len();
        1 + varint_len(body as u64) + body
    }

    /// Appends the entry: `ChunksToMove { target_buffer, data }`.
    fn write(&self, smb: &SmbAbi, out: &mut Vec<u8>) {
        out.push(0x0a); // chunks_to_move = 1
        push_varint(out, self.body_len() as u64);
        out.push(0x18); // target_buffer = 3
        push_varint(out, self.target_buffer.into());
        out.push(0x22); // data = 4
        push_varint(out, self.data_len() as u64);
        out.extend_from_slice(&self.header.chunk_id.to_le_bytes());
        out.extend_from_slice(&self.header.writer_id.to_le_bytes());
        out.extend_from_slice(&self.header.packets_word().to_le_bytes());
        let (offset, n) = (self.chunk.payload_offset(), self.chunk.payload_size());
        if !smb.mem().read_append(offset, n, out) {
            // Our own chunk layout is always in bounds; keep the frame's
            // announced length anyway.
            out.resize(out.len() + n, 0);
        }
    }
}

/// The batch's chunks that can go inline, in order, and how many cannot
/// (not Complete, or larger than a frame): those are freed and lost, and
/// counted by the caller.
pub fn collect(batch: &CommitBatch, smb: &SmbAbi) -> (Vec<InlineChunk>, u64) {
    let mut skipped = 0;
    let mut chunks = Vec::with_capacity(batch.chunks_to_move.len());
    for c in &batch.chunks_to_move {
        let chunk = match smb.chunk_at(c.page as usize, c.chunk as usize) {
            Ok((ChunkState::Complete, chunk)) => chunk,
            _ => {
                skipped += 1;
                continue;
            }
        };
        let inline = InlineChunk {
            header: smb.chunk_header(&chunk),
            chunk,
            target_buffer: c.target_buffer.into(),
        };
        if inline.entry_len() > MAX_COMMIT_REQUEST_BYTES {
            skipped += 1;
            let _ = smb.release_complete_chunk_as_free(inline.chunk);
            continue;
        }
        chunks.push(inline);
    }
    (chunks, skipped)
}

/// Splits `chunks` into runs whose entries fit one request, the last run
/// also holding `tail_len` bytes (patches, flush id; on its own if it does
/// not fit with chunks). Each range comes with its request's length.
pub fn frames(chunks: &[InlineChunk], tail_len: usize) -> Vec<(Range<usize>, usize)> {
    let mut out = Vec::new();
    let (mut start, mut len) = (0, 0);
    for (i, c) in chunks.iter().enumerate() {
        let n = c.entry_len();
        if i > start && len + n > MAX_COMMIT_REQUEST_BYTES {
            out.push((start..i, len));
            (start, len) = (i, 0);
        }
        len += n;
    }
    let end = chunks.len();
    match (end > start, len + tail_len <= MAX_COMMIT_REQUEST_BYTES) {
        (true, true) => out.push((start..end, len + tail_len)),
        (true, false) => {
            out.push((start..end, len));
            out.push((end..end, tail_len));
        }
        (false, _) if tail_len > 0 => out.push((end..end, tail_len)),
        (false, _) => {}
    }
    out
}

/// Appends one request: the run's entries (each chunk freed once copied),
/// then `tail` (already encoded CommitDataRequest fields).
pub fn write_request(smb: &SmbAbi, run: &[InlineChunk], tail: &[u8], out: &mut Vec<u8>) {
    for c in run {
        c.write(smb, out);
    }
    out.extend_from_slice(tail);
}

/// Frees the chunks of a run once their bytes are in a frame (or the frame
/// could not be built: they are lost either way, and counted).
pub fn free(smb: &SmbAbi, chunks: impl IntoIterator<Item = InlineChunk>) {
    for c in chunks {
        // Only we touch our private SMB: this cannot fail.
        let _ = smb.release_complete_chunk_as_free(c.chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::protos::CommitDataRequest;
    use crate::tracing::core::arbiter::{ChunkToMove, ChunkToPatch, Patch};
    use crate::tracing::core::smb_abi::PageLayout;

    /// An SMB of `pages` pages of `page` bytes, each one Complete chunk
    /// whose payload is filled with its page index.
    fn smb_with_complete_chunks(pages: usize, page: usize) -> SmbAbi {
        let mem =
            std::sync::Arc::new(crate::mem::shared_mem::SharedMem::new_heap(pages * page).unwrap());
        let smb = SmbAbi::new(mem, page).unwrap();
        for p in 0..pages {
            assert!(smb.try_partition_page(p, PageLayout::Div1));
            let header = ChunkHeader {
                chunk_id: p as u32 + 10,
                writer_id: 1,
                packet_count: 1,
                flags: 0,
            };
            let c = smb.try_acquire_chunk_for_writing(p, 0, &header).unwrap();
            smb.mem()
                .write(c.payload_offset(), &vec![p as u8; c.payload_size()]);
            smb.release_chunk_as_complete(c).unwrap();
        }
        smb
    }

    fn batch(pages: usize) -> CommitBatch {
        CommitBatch {
            chunks_to_move: (0..pages as u32)
                .map(|page| ChunkToMove {
                    page,
                    chunk: 0,
                    target_buffer: 3,
                })
                .collect(),
            chunks_to_patch: vec![ChunkToPatch {
                target_buffer: 3,
                writer_id: 1,
                chunk_id: 10,
                patches: vec![Patch {
                    offset: 4,
                    data: [1, 2, 3, 4],
                }],
                has_more_patches: false,
            }],
            flush_request_id: Some(77),
        }
    }

    #[test]
    fn a_batch_goes_out_in_full_frames_with_the_tail_last() {
        let (pages, page) = (10, 32 * 1024);
        let smb = smb_with_complete_chunks(pages, page);
        let b = batch(pages);
        let tail = crate::traced_probes::wire::commit_data(&CommitBatch {
            chunks_to_move: Vec::new(),
            ..b.clone()
        });
        let (chunks, skipped) = collect(&b, &smb);
        assert_eq!((chunks.len(), skipped), (pages, 0));
        let plan = frames(&chunks, tail.len());
        // 32 KiB chunks: three to a 128 KiB frame.
        assert_eq!(
            plan.iter().map(|(r, _)| r.len()).collect::<Vec<_>>(),
            vec![3, 3, 3, 1]
        );
        let mut ids = Vec::new();
        for (i, (range, len)) in plan.iter().enumerate() {
            let last = i + 1 == plan.len();
            let mut out = Vec::new();
            write_request(
                &smb,
                &chunks[range.clone()],
                if last { &tail } else { &[] },
                &mut out,
            );
            assert_eq!(out.len(), *len);
            assert!(out.len() <= MAX_COMMIT_REQUEST_BYTES);
            let req: CommitDataRequest = crate::traced_probes::wire::decode(&out).unwrap();
            for m in &req.chunks_to_move {
                let data = m.data.as_deref().unwrap();
                assert_eq!(m.target_buffer, Some(3));
                assert_eq!(data.len(), page - 8); // after the page header
                let id = u32::from_le_bytes(data[0..4].try_into().unwrap());
                assert!(data[8..].iter().all(|&b| b as u32 == id - 10));
                ids.push(id);
            }
            assert_eq!(req.flush_request_id.is_some(), last);
            assert_eq!(req.chunks_to_patch.len(), last as usize);
        }
        assert_eq!(ids, (10..10 + pages as u32).collect::<Vec<_>>());
        free(&smb, chunks);
        assert!((0..pages).all(|p| smb.is_page_free(p)));
    }

    #[test]
    fn a_tail_alone_or_too_big_to_share_gets_its_own_frame() {
        assert_eq!(frames(&[], 0), vec![]);
        assert_eq!(frames(&[], 9), vec![(0..0, 9)]);
        let smb = smb_with_complete_chunks(1, 32 * 1024);
        let (chunks, _) = collect(&batch(1), &smb);
        let entry = chunks[0].entry_len();
        assert_eq!(frames(&chunks, 9), vec![(0..1, entry + 9)]);
        let big = MAX_COMMIT_REQUEST_BYTES - entry + 1;
        assert_eq!(frames(&chunks, big), vec![(0..1, entry), (1..1, big)]);
    }
}

//! A minimal in-test service: copies committed chunks out of the SMB
//! (Complete -> BeingRead -> Free), applies patches and reassembles each
//! writer's packets in chunk-id order.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};

use tracebox::tracing::core::arbiter::{BufferId, CommitBatch, ProducerTransport, WriterId};
use tracebox::tracing::core::chunk_reader::{Fragment, FragmentIter};
use tracebox::tracing::core::smb_abi::{
    SmbAbi, FLAG_CHUNK_NEEDS_PATCHING, FLAG_FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK,
    FLAG_LAST_PACKET_CONTINUES_ON_NEXT_CHUNK,
};

struct StoredChunk {
    payload: Vec<u8>,
    count: u16,
    flags: u8,
}

#[derive(Default)]
struct Sequence {
    next_chunk_id: u32,
    partial: Vec<u8>,
    in_packet: bool,
    packets: Vec<Vec<u8>>,
}

#[derive(Default)]
pub struct FakeService {
    abi: Option<SmbAbi>,
    chunks: BTreeMap<(WriterId, u32), StoredChunk>,
    seqs: HashMap<WriterId, Sequence>,
    pub chunks_moved: u64,
    pub move_errors: u64,
    pub patches_applied: u64,
    pub patch_misses: u64,
    /// Packets the writer aborted (drop marker) or orphaned.
    pub packets_lost: u64,
    pub corrupt_chunks: u64,
    pub flush_ids: Vec<u64>,
    /// Largest packet count seen in a committed chunk header.
    pub max_packet_count: u16,
    pub registered: Vec<(WriterId, BufferId)>,
    pub unregistered: Vec<WriterId>,
}

impl FakeService {
    pub fn new(abi: SmbAbi) -> FakeService {
        FakeService {
            abi: Some(abi),
            ..Default::default()
        }
    }

    pub fn commit(&mut self, batch: &CommitBatch) {
        let abi = self.abi.clone().expect("abi");
        for ctm in &batch.chunks_to_move {
            match abi.try_acquire_chunk_for_reading(ctm.page as usize, ctm.chunk as usize) {
                Ok(c) => {
                    let mut payload = Vec::new();
                    let h = abi.read_chunk(&c, &mut payload);
                    abi.release_chunk_as_free(c).expect("release");
                    self.chunks.insert(
                        (h.writer_id, h.chunk_id),
                        StoredChunk {
                            payload,
                            count: h.packet_count,
                            flags: h.flags,
                        },
                    );
                    self.chunks_moved += 1;
                    self.max_packet_count = self.max_packet_count.max(h.packet_count);
                }
                Err(_) => self.move_errors += 1,
            }
        }
        for ctp in &batch.chunks_to_patch {
            let Some(ch) = self.chunks.get_mut(&(ctp.writer_id, ctp.chunk_id)) else {
                self.patch_misses += 1;
                continue;
            };
            for p in &ctp.patches {
                let off = p.offset as usize;
                match ch.payload.get_mut(off..off + 4) {
                    Some(dst) => {
                        dst.copy_from_slice(&p.data);
                        self.patches_applied += 1;
                    }
                    None => self.patch_misses += 1,
                }
            }
            if !ctp.has_more_patches {
                ch.flags &= !FLAG_CHUNK_NEEDS_PATCHING;
            }
        }
        if let Some(id) = batch.flush_request_id {
            self.flush_ids.push(id);
        }
        self.read_all();
    }

    fn read_all(&mut self) {
        let writers: Vec<WriterId> = self.chunks.keys().map(|k| k.0).collect();
        for w in writers {
            let seq = self.seqs.entry(w).or_default();
            loop {
                let key = (w, seq.next_chunk_id);
                match self.chunks.get(&key) {
                    Some(c) if c.flags & FLAG_CHUNK_NEEDS_PATCHING == 0 => {}
                    _ => break,
                }
                let c = self.chunks.remove(&key).unwrap();
                seq.next_chunk_id = seq.next_chunk_id.wrapping_add(1);
                let frags: Vec<_> = FragmentIter::new(&c.payload, c.count).collect();
                for (i, f) in frags.into_iter().enumerate() {
                    let continues_prev =
                        i == 0 && c.flags & FLAG_FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK != 0;
                    let continues_next = i + 1 == c.count as usize
                        && c.flags & FLAG_LAST_PACKET_CONTINUES_ON_NEXT_CHUNK != 0;
                    let data = match f {
                        Ok(Fragment::Data(d)) => d,
                        Ok(Fragment::DropPacket) => {
                            seq.partial.clear();
                            seq.in_packet = false;
                            self.packets_lost += 1;
                            break;
                        }
                        Err(_) => {
                            self.corrupt_chunks += 1;
                            seq.partial.clear();
                            seq.in_packet = false;
                            break;
                        }
                    };
                    if continues_prev {
                        if !seq.in_packet {
                            if !continues_next {
                                self.packets_lost += 1; // end of an orphan continuation
                            }
                            continue;
                        }
                        seq.partial.extend_from_slice(data);
                    } else {
                        if seq.in_packet {
                            self.packets_lost += 1; // never terminated
                        }
                        seq.partial.clear();
                        seq.partial.extend_from_slice(data);
                        seq.in_packet = true;
                    }
                    if !continues_next {
                        let p = std::mem::take(&mut seq.partial);
                        seq.in_packet = false;
                        if !p.is_empty() {
                            seq.packets.push(p);
                        }
                    }
                }
            }
        }
    }

    /// Packets of `writer` read so far, in order.
    pub fn packets(&self, writer: WriterId) -> &[Vec<u8>] {
        self.seqs.get(&writer).map_or(&[], |s| &s.packets)
    }

    /// Chunks stored but not yet readable (gaps or awaiting patches).
    pub fn chunks_pending(&self) -> usize {
        self.chunks.len()
    }
}

/// A [`ProducerTransport`] that either hands batches to the fake service
/// at once (`immediate`) or queues them for a consumer.
pub struct TestTransport {
    pub service: Mutex<FakeService>,
    immediate: bool,
    queue: Mutex<VecDeque<CommitBatch>>,
    cond: Condvar,
}

impl TestTransport {
    pub fn new(abi: SmbAbi, immediate: bool) -> Arc<TestTransport> {
        Arc::new(TestTransport {
            service: Mutex::new(FakeService::new(abi)),
            immediate,
            queue: Mutex::new(VecDeque::new()),
            cond: Condvar::new(),
        })
    }

    /// Delivers every queued batch; returns how many.
    pub fn deliver_queued(&self) -> usize {
        let batches: Vec<_> = self.queue.lock().unwrap().drain(..).collect();
        let mut svc = self.service.lock().unwrap();
        for b in &batches {
            svc.commit(b);
        }
        batches.len()
    }

    /// Delivers one queued batch, waiting up to `ms` for one. False if none.
    pub fn deliver_one(&self, ms: u64) -> bool {
        let q = self.queue.lock().unwrap();
        let (mut q, _) = self
            .cond
            .wait_timeout_while(q, std::time::Duration::from_millis(ms), |q| q.is_empty())
            .unwrap();
        let Some(b) = q.pop_front() else { return false };
        drop(q);
        self.service.lock().unwrap().commit(&b);
        true
    }

    pub fn queued(&self) -> usize {
        self.queue.lock().unwrap().len()
    }
}

impl ProducerTransport for TestTransport {
    fn commit_data(&self, batch: CommitBatch) {
        if self.immediate {
            self.service.lock().unwrap().commit(&batch);
        } else {
            self.queue.lock().unwrap().push_back(batch);
            self.cond.notify_all();
        }
    }
    fn register_trace_writer(&self, writer_id: WriterId, target_buffer: BufferId) {
        self.service
            .lock()
            .unwrap()
            .registered
            .push((writer_id, target_buffer));
    }
    fn unregister_trace_writer(&self, writer_id: WriterId) {
        self.service.lock().unwrap().unregistered.push(writer_id);
    }
}

//! Helpers shared by the trace buffer tests: a tiny chunk builder, a
//! reference TraceWriter-like fragmenter and a deterministic PRNG.

use super::{ClientIdentity, PacketInfo, TraceBuffer};
use crate::tracing::core::smb_abi::{
    FLAG_FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK as FC,
    FLAG_LAST_PACKET_CONTINUES_ON_NEXT_CHUNK as LC,
};

pub fn client(uid: u32) -> ClientIdentity {
    ClientIdentity {
        uid,
        pid: Some(uid as i32 + 1),
        machine_id: 0,
    }
}

/// Encodes one fragment: size varint (1 byte if small, else the 4-byte
/// redundant form writers use) + bytes.
pub fn frag(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let n = bytes.len() as u32;
    if n < 128 {
        out.push(n as u8);
    } else {
        out.extend(crate::protozero::redundant_varint(n));
    }
    out.extend_from_slice(bytes);
    out
}

/// A chunk as a producer would commit it.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub id: u32,
    pub num_fragments: u16,
    pub flags: u8,
    pub payload: Vec<u8>,
}

impl Chunk {
    /// Builds a chunk from raw packets, zero-padded to `payload_size`
    /// (like a whole SMB chunk) when it is larger.
    pub fn new(id: u32, packets: &[&[u8]], flags: u8, payload_size: usize) -> Chunk {
        let mut payload: Vec<u8> = packets.iter().flat_map(|p| frag(p)).collect();
        if payload.len() < payload_size {
            payload.resize(payload_size, 0);
        }
        Chunk {
            id,
            num_fragments: packets.len() as u16,
            flags,
            payload,
        }
    }
}

/// Commits a chunk as complete.
pub fn commit(buf: &mut TraceBuffer, producer: u16, writer: u16, c: &Chunk) {
    buf.copy_chunk_untrusted(
        producer,
        client(producer as u32 * 100),
        writer,
        c.id,
        c.num_fragments,
        c.flags,
        true,
        &c.payload,
    );
}

/// Convenience: commit a chunk made of `packets`.
pub fn put(
    buf: &mut TraceBuffer,
    producer: u16,
    writer: u16,
    id: u32,
    packets: &[&[u8]],
    flags: u8,
) {
    commit(buf, producer, writer, &Chunk::new(id, packets, flags, 0));
}

/// One full read pass: every packet returned, with its info.
pub fn read_pass(buf: &mut TraceBuffer) -> Vec<(Vec<u8>, PacketInfo)> {
    buf.begin_read();
    let mut out = Vec::new();
    while let Some((p, info)) = buf.read_next_trace_packet() {
        assert!(p.size() > 0);
        out.push((p.to_vec(), info));
    }
    out
}

/// Packets only.
pub fn read_bytes(buf: &mut TraceBuffer) -> Vec<Vec<u8>> {
    read_pass(buf).into_iter().map(|(p, _)| p).collect()
}

/// xorshift64*: deterministic, good enough for tests.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Splits packets into fixed-size chunks the way a TraceWriter does:
/// a packet that does not fit continues in the next chunk, with the
/// continuation flags set on both sides.
pub struct RefWriter {
    chunk_payload: usize,
    next_id: u32,
    cur: Vec<u8>,
    cur_fragments: u16,
    cur_flags: u8,
    pub chunks: Vec<Chunk>,
}

impl RefWriter {
    pub fn new(chunk_payload: usize, first_id: u32) -> RefWriter {
        assert!(chunk_payload >= 16);
        RefWriter {
            chunk_payload,
            next_id: first_id,
            cur: Vec::new(),
            cur_fragments: 0,
            cur_flags: 0,
            chunks: Vec::new(),
        }
    }

    pub fn write_packet(&mut self, pkt: &[u8]) {
        let mut rest = pkt;
        loop {
            let room = self.chunk_payload - self.cur.len();
            if room < 5 {
                self.finish_chunk();
                continue;
            }
            let header = if rest.len() < 128 && rest.len() < room {
                1
            } else {
                4
            };
            let take = rest.len().min(room - header);
            self.cur.extend(frag(&rest[..take]));
            self.cur_fragments += 1;
            rest = &rest[take..];
            if rest.is_empty() {
                return;
            }
            self.cur_flags |= LC;
            self.finish_chunk();
            self.cur_flags = FC;
        }
    }

    fn finish_chunk(&mut self) {
        let mut payload = std::mem::take(&mut self.cur);
        payload.resize(self.chunk_payload, 0);
        self.chunks.push(Chunk {
            id: self.next_id,
            num_fragments: self.cur_fragments,
            flags: self.cur_flags,
            payload,
        });
        self.next_id = self.next_id.wrapping_add(1);
        self.cur_fragments = 0;
        self.cur_flags = 0;
    }

    /// Closes the chunk in progress (if any) and returns all chunks.
    pub fn finish(mut self) -> Vec<Chunk> {
        if self.cur_fragments > 0 {
            self.finish_chunk();
        }
        self.chunks
    }
}

/// A RING_BUFFER-policy buffer of `size` bytes.
pub fn ring(size: usize) -> TraceBuffer {
    TraceBuffer::new(size, super::OverwritePolicy::Overwrite).unwrap()
}

/// 1008 payload bytes make a 1024-byte record.
pub const P1K: usize = 1008;

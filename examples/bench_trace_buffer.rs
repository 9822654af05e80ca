//! Read-back cost of the central trace buffer, for instruction counts
//! under callgrind (a developer benchmark: compare two commits with the
//! same arguments; docs/BENCHMARKS.md has the figures).
//!
//! `bench_trace_buffer ftrace|ftrace-big|sdk [ROUNDS]`
//!   ftrace: 4 writers commit 32 KiB chunks (traced_probes' SMB page)
//!     filled with 3-5 KiB bundles that span chunk boundaries, 64 MiB
//!     DISCARD buffer; each round writes 128 chunks and drains them in
//!     one read pass, as a write_into_file period does.
//!   ftrace-big: the same with 24-104 KiB bundles (a drain's 32-page step
//!     of a busy cpu is one bundle), each spanning 1-4 chunks.
//!   sdk: one writer commits 4 KiB chunks of 100 B packets until a 128 MiB
//!     buffer is full, read back in one pass (scripts/bench/service-ratio.sh).
//!
//! Prints `packets=.. chunks=.. bytes=..`. Measure only the reads with
//! `valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*read_all*'`
//! and divide the instructions by `packets`.

use std::process::ExitCode;

use tracebox::protozero::redundant_varint;
use tracebox::tracing::core::smb_abi::{
    FLAG_FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK as FIRST_CONTINUES,
    FLAG_LAST_PACKET_CONTINUES_ON_NEXT_CHUNK as LAST_CONTINUES,
};
use tracebox::tracing::service::trace_buffer::{ClientIdentity, OverwritePolicy, TraceBuffer};

/// SMB chunk header size: payload capacity is the chunk minus this.
const CHUNK_HEADER: usize = 16;
/// Fragment size fields are 4-byte redundant varints, as writers make them.
const SIZE_FIELD: usize = 4;

/// One producer's trace writer, cutting a packet stream into chunks.
struct Writer {
    id: u16,
    next_chunk_id: u32,
    /// Bytes of the packet in progress still to be written.
    pending: usize,
    /// Deterministic packet sizes.
    rng: u64,
    min_packet: usize,
    packet_spread: usize,
}

struct Chunk {
    id: u32,
    fragments: u16,
    flags: u8,
    payload: Vec<u8>,
}

impl Writer {
    fn next_packet_size(&mut self) -> usize {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.min_packet + (self.rng as usize) % (self.packet_spread + 1)
    }

    /// Fills one chunk of `capacity` payload bytes as a trace writer does:
    /// packets back to back, the last one continuing on the next chunk.
    fn chunk(&mut self, capacity: usize) -> Chunk {
        let mut payload = Vec::with_capacity(capacity);
        let mut fragments = 0u16;
        let mut flags = 0u8;
        if self.pending > 0 {
            flags |= FIRST_CONTINUES;
        }
        loop {
            let room = capacity - payload.len();
            if room <= SIZE_FIELD {
                break;
            }
            if self.pending == 0 {
                self.pending = self.next_packet_size();
            }
            let n = self.pending.min(room - SIZE_FIELD);
            payload.extend(redundant_varint(n as u32));
            payload.resize(payload.len() + n, 0x5a);
            fragments += 1;
            self.pending -= n;
            if self.pending > 0 {
                flags |= LAST_CONTINUES;
                break;
            }
        }
        payload.resize(capacity, 0);
        let id = self.next_chunk_id;
        self.next_chunk_id += 1;
        Chunk {
            id,
            fragments,
            flags,
            payload,
        }
    }
}

fn commit(buf: &mut TraceBuffer, w: &mut Writer, chunk_size: usize) {
    let c = w.chunk(chunk_size - CHUNK_HEADER);
    let client = ClientIdentity {
        uid: 0,
        pid: Some(1),
        machine_id: 0,
    };
    buf.copy_chunk_untrusted(
        1,
        client,
        w.id,
        c.id,
        c.fragments,
        c.flags,
        true,
        &c.payload,
    );
}

/// One read pass to the end; returns (packets, bytes).
#[inline(never)]
fn read_all(buf: &mut TraceBuffer) -> (u64, u64) {
    let (mut packets, mut bytes) = (0u64, 0u64);
    buf.begin_read();
    while let Some((packet, _info)) = buf.read_next_trace_packet() {
        packets += 1;
        bytes += std::hint::black_box(packet.size()) as u64;
    }
    (packets, bytes)
}

fn writers(n: u16, min_packet: usize, packet_spread: usize) -> Vec<Writer> {
    (0..n)
        .map(|i| Writer {
            id: i + 1,
            next_chunk_id: 0,
            pending: 0,
            rng: 0x9e37_79b9_7f4a_7c15 ^ u64::from(i),
            min_packet,
            packet_spread,
        })
        .collect()
}

fn ftrace(rounds: usize, min_packet: usize, packet_spread: usize) -> (u64, u64, u64) {
    const CHUNK: usize = 32 * 1024;
    const CHUNKS_PER_ROUND: usize = 128;
    let mut buf = TraceBuffer::new(64 << 20, OverwritePolicy::Discard).expect("size");
    let mut ws = writers(4, min_packet, packet_spread);
    let (mut packets, mut bytes) = (0, 0);
    for _ in 0..rounds {
        for i in 0..CHUNKS_PER_ROUND {
            let n = ws.len();
            commit(&mut buf, &mut ws[i % n], CHUNK);
        }
        let (p, b) = read_all(&mut buf);
        packets += p;
        bytes += b;
    }
    (packets, bytes, buf.stats().chunks_read)
}

fn sdk(rounds: usize) -> (u64, u64, u64) {
    const CHUNK: usize = 4 * 1024;
    const BUFFER: usize = 128 << 20;
    let (mut packets, mut bytes, mut chunks) = (0, 0, 0);
    for _ in 0..rounds {
        let mut buf = TraceBuffer::new(BUFFER, OverwritePolicy::Discard).expect("size");
        let mut ws = writers(1, 100, 0);
        // Records are the chunk plus a 16-byte header; stop before DISCARD.
        for _ in 0..BUFFER / (CHUNK + 16) - 1 {
            commit(&mut buf, &mut ws[0], CHUNK);
        }
        let (p, b) = read_all(&mut buf);
        packets += p;
        bytes += b;
        chunks += buf.stats().chunks_read;
    }
    (packets, bytes, chunks)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let rounds = |default| args.get(2).and_then(|s| s.parse().ok()).unwrap_or(default);
    let (packets, bytes, chunks) = match args.get(1).map(String::as_str) {
        Some("ftrace") => ftrace(rounds(50), 3 << 10, 2 << 10),
        Some("ftrace-big") => ftrace(rounds(50), 24 << 10, 80 << 10),
        Some("sdk") => sdk(rounds(1)),
        _ => {
            eprintln!("usage: bench_trace_buffer ftrace|ftrace-big|sdk [ROUNDS]");
            return ExitCode::FAILURE;
        }
    };
    println!("packets={packets} chunks={chunks} bytes={bytes}");
    ExitCode::SUCCESS
}

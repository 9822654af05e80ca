//! TraceWriter throughput shaped like the SDK writer bench, for a ratio.
//!
//! Writes exactly what `sdk-producer --fixed-payload` writes through the C
//! SDK (tests/sdk-interop/cpp/c_writer.cc): one TracePacket per call holding
//! `for_testing { str: payload, seq_value: i, counter: thread }`, the same
//! packet counts, into an SMB of the SDK's default shape (256 KiB, 4 KiB
//! pages) with the Stall policy. A consumer thread plays the service: it
//! takes every committed chunk, copies it out and frees it.
//!
//! CPU time is the figure to compare (the box is shared): `writer_cpu_s` is
//! the writer thread alone, `process_cpu_s` adds the consumer thread.
//! One line per size on stdout:
//! `bench=trace_writer impl=tracebox payload_size=.. packets=.. packet_bytes=..
//!  write_s=.. packets_per_s=.. bytes_per_s=.. writer_cpu_s=.. writer_cpu_ns_per_packet=..
//!  process_cpu_s=.. stalls=.. dropped=.. consumed_bytes=..`
//!
//! Usage: bench_trace_writer_sdk [scale] [smb_kib] [page_kib] [sizes,...]

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tracebox::mem::shared_mem::SharedMem;
use tracebox::protozero;
use tracebox::tracing::core::arbiter::{
    Arbiter, ArbiterConfig, BufferExhaustedPolicy, BufferId, CommitBatch, ProducerTransport,
    WriterId,
};
use tracebox::tracing::core::smb_abi::SmbAbi;

// TracePacket.for_testing and TestEvent fields (test_event.proto).
const FIELD_FOR_TESTING: u32 = 900;
const FIELD_STR: u32 = 1;
const FIELD_SEQ_VALUE: u32 = 2;
const FIELD_COUNTER: u32 = 3;

struct ChannelTransport(Mutex<Sender<CommitBatch>>);

impl ProducerTransport for ChannelTransport {
    fn commit_data(&self, batch: CommitBatch) {
        let _ = self.0.lock().unwrap().send(batch);
    }
    fn register_trace_writer(&self, _: WriterId, _: BufferId) {}
    fn unregister_trace_writer(&self, _: WriterId) {}
}

fn timespec_s(ts: &libc::timespec) -> f64 {
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// CPU seconds of the calling thread.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    timespec_s(&ts)
}

/// CPU seconds of the whole process (all threads).
fn process_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    timespec_s(&ts)
}

/// Copies every committed chunk out and frees it; returns bytes copied.
fn consume(abi: SmbAbi, rx: Receiver<CommitBatch>) -> u64 {
    let mut copied = 0u64;
    let mut buf = Vec::with_capacity(64 * 1024);
    for batch in rx {
        for ctm in &batch.chunks_to_move {
            if let Ok(c) = abi.try_acquire_chunk_for_reading(ctm.page as usize, ctm.chunk as usize)
            {
                buf.clear();
                abi.read_chunk(&c, &mut buf);
                copied += buf.len() as u64;
                let _ = abi.release_chunk_as_free(c);
            }
        }
    }
    copied
}

/// Packet counts of scripts/bench/sdk-writer.sh.
fn packets_for(size: usize, scale: u64) -> u64 {
    if size <= 100 {
        500_000 * scale
    } else {
        20_000 * scale
    }
}

fn run(size: usize, packets: u64, smb_size: usize, page_size: usize) -> String {
    let abi = SmbAbi::new(Arc::new(SharedMem::new_heap(smb_size).unwrap()), page_size).unwrap();
    let (tx, rx) = channel();
    let consumer = {
        let abi = abi.clone();
        std::thread::spawn(move || consume(abi, rx))
    };
    let cfg = ArbiterConfig {
        batch_commits: true,
        ..Default::default()
    };
    let arbiter = Arbiter::new(abi, cfg, Arc::new(ChannelTransport(Mutex::new(tx))));
    let mut w = arbiter
        .create_trace_writer(1, BufferExhaustedPolicy::Stall)
        .unwrap();
    // Same bytes as the SDK's fixed payload: one repeated letter.
    let payload = vec![b'x'; size];
    let thread_id = 0u64;

    let proc0 = process_cpu_s();
    let cpu0 = thread_cpu_s();
    let start = Instant::now();
    for i in 0..packets {
        let mut p = w.new_packet();
        let ev = protozero::begin_nested(&mut p, FIELD_FOR_TESTING);
        protozero::put_bytes(&mut p, FIELD_STR, &payload);
        protozero::put_varint(&mut p, FIELD_SEQ_VALUE, i as u32 as u64);
        protozero::put_varint(&mut p, FIELD_COUNTER, thread_id);
        protozero::end_nested(&mut p, ev);
    }
    w.flush();
    let write_s = start.elapsed().as_secs_f64();
    let writer_cpu = thread_cpu_s() - cpu0;
    let wstats = w.stats();
    let astats = arbiter.stats();
    drop(w);
    drop(arbiter); // closes the channel, the consumer drains and ends
    let consumed = consumer.join().unwrap();
    let process_cpu = process_cpu_s() - proc0;
    let packet_bytes = packet_size(size, packets);
    format!(
        "bench=trace_writer impl=tracebox payload_size={size} packets={packets} \
         packet_bytes={packet_bytes} smb_kb={} page_kb={} write_s={write_s:.3} \
         packets_per_s={:.0} bytes_per_s={:.0} writer_cpu_s={writer_cpu:.3} \
         writer_cpu_ns_per_packet={:.0} process_cpu_s={process_cpu:.3} \
         stalls={} dropped={} consumed_bytes={consumed}",
        smb_size / 1024,
        page_size / 1024,
        packets as f64 / write_s,
        packet_bytes as f64 / write_s,
        writer_cpu * 1e9 / packets as f64,
        astats.stalls,
        wstats.packets_dropped,
    )
}

/// Total encoded TracePacket bytes (without the SMB packet headers).
fn packet_size(size: usize, packets: u64) -> u64 {
    let mut total = 0u64;
    // seq_value varint length varies with i; sum it exactly by ranges.
    let mut lo = 0u64;
    while lo < packets {
        let v = tracebox::protozero::varint_len(lo);
        let hi = match v {
            1 => 1u64 << 7,
            2 => 1 << 14,
            3 => 1 << 21,
            4 => 1 << 28,
            _ => u64::MAX,
        }
        .min(packets);
        // for_testing tag (2) + 4-byte length + str tag/len/payload +
        // seq_value tag + varint + counter tag + 1.
        let body = 1 + protozero::varint_len(size as u64) as u64 + size as u64 + 1 + v as u64 + 2;
        total += (hi - lo) * (2 + 4 + body);
        lo = hi;
    }
    total
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let scale: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
    let smb_kib: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(256);
    let page_kib: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(4);
    let sizes: Vec<usize> = args
        .get(4)
        .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| vec![16, 100, 4096]);
    for size in sizes {
        let line = run(
            size,
            packets_for(size, scale),
            smb_kib * 1024,
            page_kib * 1024,
        );
        println!("{line}");
    }
}

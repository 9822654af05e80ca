//! Throughput of TraceWriter into an in-process SMB.
//!
//! A writer thread writes packets of a fixed size; a consumer thread plays
//! the service (Complete -> BeingRead, copy the payload out, free). Prints
//! one JSON object per packet size on stdout:
//!
//! `{"bench":"trace_writer","impl":"tracebox","packet_size":16,...}`
//!
//! Usage: bench_trace_writer [seconds_per_size] [smb_kib] [page_kib]

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracebox::mem::shared_mem::SharedMem;
use tracebox::protozero::Stream;
use tracebox::tracing::core::arbiter::{
    Arbiter, ArbiterConfig, BufferExhaustedPolicy, BufferId, CommitBatch, ProducerTransport,
    WriterId,
};
use tracebox::tracing::core::smb_abi::SmbAbi;

struct ChannelTransport(Mutex<Sender<CommitBatch>>);

impl ProducerTransport for ChannelTransport {
    fn commit_data(&self, batch: CommitBatch) {
        let _ = self.0.lock().unwrap().send(batch);
    }
    fn register_trace_writer(&self, _: WriterId, _: BufferId) {}
    fn unregister_trace_writer(&self, _: WriterId) {}
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

fn run(packet_size: usize, seconds: f64, smb_size: usize, page_size: usize) -> String {
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
    w.set_emit_sequence_markers(false);
    let payload: Vec<u8> = (0..packet_size).map(|i| i as u8).collect();

    let budget = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut packets = 0u64;
    loop {
        for _ in 0..1024 {
            w.new_packet().write(&payload);
        }
        packets += 1024;
        if start.elapsed() >= budget {
            break;
        }
    }
    w.flush();
    let elapsed = start.elapsed().as_secs_f64();
    let wstats = w.stats();
    let astats = arbiter.stats();
    drop(w);
    drop(arbiter); // closes the channel
    let copied = consumer.join().unwrap();
    format!(
        "{{\"bench\":\"trace_writer\",\"impl\":\"tracebox\",\"packet_size\":{packet_size},\
         \"packets\":{packets},\"seconds\":{elapsed:.3},\"packets_per_sec\":{:.0},\
         \"bytes_per_sec\":{:.0},\"smb_size\":{smb_size},\"page_size\":{page_size},\
         \"stalls\":{},\"packets_dropped\":{},\"service_bytes_copied\":{copied}}}",
        packets as f64 / elapsed,
        (packets * packet_size as u64) as f64 / elapsed,
        astats.stalls,
        wstats.packets_dropped,
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seconds: f64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let smb_kib: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(256);
    let page_kib: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(4);
    for size in [16usize, 100, 4096] {
        println!("{}", run(size, seconds, smb_kib * 1024, page_kib * 1024));
    }
}

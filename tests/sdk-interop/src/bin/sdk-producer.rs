//! sdk-producer: an unmodified Perfetto SDK producer (system backend) that
//! writes a deterministic, checkable packet stream.
//!
//! It connects to $PERFETTO_PRODUCER_SOCK_NAME (SDK default otherwise),
//! registers a data source and, once the service starts it, writes N packets
//! of S payload bytes from each of T threads (see payload.rs for the format),
//! flushes, reports throughput, then waits for the data source stop.

use perfetto_sdk::data_source::{
    DataSource, DataSourceArgsBuilder, DataSourceBufferExhaustedPolicy, StopGuard, TraceContext,
};
use perfetto_sdk::producer::{Backends, Producer, ProducerInitArgsBuilder};
use perfetto_sdk::protos::trace::trace_packet::TracePacket;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tracebox_sdk_interop::args::{parse_size, Args};
use tracebox_sdk_interop::payload::*;
use tracebox_sdk_interop::procstat::self_usage;
use tracebox_sdk_interop::quit::{self, wait_until, WaitEnd};

const USAGE: &str = "sdk-producer [--data-source NAME] [--threads T] [--packets N] [--size S]
    [--fixed-payload] [--policy drop|stall-drop|stall-abort] [--shmem-kb K]
    [--done-file PATH] [--stop-file PATH] [--start-timeout-s S] [--timeout-s S]";

static DATA_SOURCE: OnceLock<DataSource<'static>> = OnceLock::new();
static STARTED: AtomicBool = AtomicBool::new(false);
static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);
static STOP_GUARDS: Mutex<Vec<StopGuard>> = Mutex::new(Vec::new());

struct Opts {
    ds_name: String,
    threads: u32,
    packets: u32,
    size: usize,
    fixed_payload: bool,
    policy: String,
    shmem_kb: u32,
    done_file: Option<PathBuf>,
    stop_file: Option<PathBuf>,
    start_timeout: Duration,
    timeout: Duration,
}

fn parse_opts() -> Opts {
    let mut a = Args::from_env(USAGE);
    let size = a.opt_str("--size").map_or(100, |s| {
        parse_size(&s).unwrap_or_else(|| a.usage_error(&format!("bad --size {s:?}")))
    });
    let policy = a.opt_str("--policy").unwrap_or_else(|| "stall-drop".into());
    if !["drop", "stall-drop", "stall-abort"].contains(&policy.as_str()) {
        a.usage_error(&format!("bad --policy {policy:?}"));
    }
    let o = Opts {
        ds_name: a
            .opt_str("--data-source")
            .unwrap_or_else(|| "tbx.sdk_test".into()),
        threads: a.opt_parse("--threads").unwrap_or(1),
        packets: a.opt_parse("--packets").unwrap_or(1000),
        size,
        fixed_payload: a.flag("--fixed-payload"),
        policy,
        shmem_kb: a.opt_parse("--shmem-kb").unwrap_or(0),
        done_file: a.opt_str("--done-file").map(PathBuf::from),
        stop_file: a.opt_str("--stop-file").map(PathBuf::from),
        start_timeout: Duration::from_secs_f64(a.opt_parse("--start-timeout-s").unwrap_or(30.0)),
        timeout: Duration::from_secs_f64(a.opt_parse("--timeout-s").unwrap_or(120.0)),
    };
    a.finish();
    if o.threads == 0 || o.packets == 0 {
        a.usage_error("--threads and --packets must be > 0");
    }
    o
}

fn register(o: &Opts) {
    let args = DataSourceArgsBuilder::new()
        .buffer_exhausted_policy(policy(&o.policy))
        .buffer_exhausted_policy_configurable(true)
        .will_notify_on_stop(true)
        .on_start(|inst, _| {
            println!("sdk-producer: started instance={inst}");
            STARTED.store(true, Ordering::SeqCst);
        })
        .on_stop(|inst, args| {
            println!("sdk-producer: stop requested instance={inst}");
            // Acknowledged once the writer threads are done (guards dropped).
            STOP_GUARDS.lock().unwrap().push(args.postpone());
            STOP_REQUESTED.store(true, Ordering::SeqCst);
        })
        .build();
    let mut ds = DataSource::new();
    if let Err(e) = ds.register(&o.ds_name, args) {
        eprintln!("sdk-producer: cannot register {}: {e}", o.ds_name);
        std::process::exit(1);
    }
    let _ = DATA_SOURCE.set(ds);
    println!("sdk-producer: registered data_source={}", o.ds_name);
}

fn policy(name: &str) -> DataSourceBufferExhaustedPolicy {
    match name {
        "drop" => DataSourceBufferExhaustedPolicy::Drop,
        "stall-abort" => DataSourceBufferExhaustedPolicy::StallAndAbort,
        _ => DataSourceBufferExhaustedPolicy::StallAndDrop,
    }
}

fn write_packet(ctx: &mut TraceContext, thread: u32, seq: u32, last: bool, payload: &[u8]) {
    ctx.add_packet(|packet: &mut TracePacket| {
        packet.msg.append_nested(FOR_TESTING_FIELD, |te| {
            te.append_type2_field(TEST_EVENT_STR, payload);
            te.append_type0_field(TEST_EVENT_SEQ_VALUE, u64::from(seq));
            te.append_type0_field(TEST_EVENT_COUNTER, u64::from(thread));
            if last {
                te.append_type0_field(TEST_EVENT_IS_LAST, 1);
            }
        });
    });
}

struct Shared {
    start: Barrier,
    written: Barrier,
    flushed: AtomicUsize,
    release: AtomicBool,
}

fn writer_thread(o: Arc<Opts>, thread: u32, sh: Arc<Shared>) {
    let ds = DATA_SOURCE.get().expect("registered");
    let mut buf = vec![0u8; o.size];
    if o.fixed_payload {
        fill_payload(thread, 0, &mut buf);
    }
    sh.start.wait();
    for seq in 0..o.packets {
        if !o.fixed_payload {
            fill_payload(thread, seq, &mut buf);
        }
        let last = seq + 1 == o.packets;
        ds.trace(|ctx| write_packet(ctx, thread, seq, last, &buf));
    }
    sh.written.wait();
    // Commit this thread's chunk and wait for the service to ack it.
    let mut asked = false;
    let sh_cb = Arc::clone(&sh);
    ds.trace(|ctx| {
        if !asked {
            asked = true;
            let sh_cb = Arc::clone(&sh_cb);
            ctx.flush(move || {
                sh_cb.flushed.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    if !asked {
        // Data source already stopped: nothing to flush.
        sh.flushed.fetch_add(1, Ordering::SeqCst);
    }
    // Keep the thread (and its TraceWriter) alive until told to exit.
    while !sh.release.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn main() {
    let o = Arc::new(parse_opts());
    quit::install_signal_handlers();
    let t0 = Instant::now();
    let deadline = t0 + o.timeout;
    let init = ProducerInitArgsBuilder::new()
        .backends(Backends::SYSTEM)
        .shmem_size_hint_kb(o.shmem_kb);
    Producer::init(init.build());
    register(&o);

    let start_deadline = Instant::now() + o.start_timeout;
    let end = wait_until(
        o.stop_file.as_ref(),
        Some(start_deadline.min(deadline)),
        || STARTED.load(Ordering::SeqCst),
    );
    if end != WaitEnd::Condition {
        eprintln!("sdk-producer: data source not started ({end:?})");
        std::process::exit(3);
    }

    let n = o.threads as usize;
    let sh = Arc::new(Shared {
        start: Barrier::new(n + 1),
        written: Barrier::new(n + 1),
        flushed: AtomicUsize::new(0),
        release: AtomicBool::new(false),
    });
    let handles: Vec<_> = (0..o.threads)
        .map(|t| {
            let (o, sh) = (Arc::clone(&o), Arc::clone(&sh));
            std::thread::spawn(move || writer_thread(o, t, sh))
        })
        .collect();
    let cpu0 = self_usage();
    sh.start.wait();
    let w0 = Instant::now();
    sh.written.wait();
    let write_s = w0.elapsed().as_secs_f64();
    let cpu1 = self_usage();
    let flush_end = wait_until(None, Some(Instant::now() + Duration::from_secs(10)), || {
        sh.flushed.load(Ordering::SeqCst) == n
    });
    let flush_s = w0.elapsed().as_secs_f64() - write_s;

    let total = u64::from(o.threads) * u64::from(o.packets);
    let packet_bytes: u64 = (0..o.threads)
        .map(|t| {
            (0..o.packets)
                .map(|s| packet_wire_size(t, s, o.size, s + 1 == o.packets) as u64)
                .sum::<u64>()
        })
        .sum();
    println!(
        "sdk-producer result=written threads={} packets_per_thread={} payload_size={} \
         total_packets={total} packet_bytes={packet_bytes} write_s={write_s:.6} \
         flush_s={flush_s:.6} flush_acked={} packets_per_s={:.0} bytes_per_s={:.0} \
         cpu_s={:.3}",
        o.threads,
        o.packets,
        o.size,
        flush_end == WaitEnd::Condition,
        total as f64 / write_s,
        packet_bytes as f64 / write_s,
        (cpu1.user_s + cpu1.sys_s) - (cpu0.user_s + cpu0.sys_s),
    );
    if let Some(p) = &o.done_file {
        if let Err(e) = std::fs::write(p, b"done\n") {
            eprintln!("sdk-producer: cannot write {}: {e}", p.display());
        }
    }

    let end = wait_until(o.stop_file.as_ref(), Some(deadline), || {
        STOP_REQUESTED.load(Ordering::SeqCst)
    });
    sh.release.store(true, Ordering::SeqCst);
    for h in handles {
        let _ = h.join();
    }
    STOP_GUARDS.lock().unwrap().clear();
    println!("sdk-producer: exit reason={end:?}");
    if end == WaitEnd::Timeout {
        std::process::exit(4);
    }
    // Let the stop acknowledgement reach the service before the process dies.
    std::thread::sleep(Duration::from_millis(100));
}

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
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tracebox_sdk_interop::args::{parse_size, Args};
use tracebox_sdk_interop::payload::*;
use tracebox_sdk_interop::procstat::self_usage;
use tracebox_sdk_interop::quit::{self, wait_until, WaitEnd};

const USAGE: &str = "sdk-producer [--data-source NAME] [--threads T] [--packets N] [--size S]
    [--thread-base B] [--api rust|c] [--fixed-payload] [--policy drop|stall-drop|stall-abort] [--shmem-kb K]
    [--done-file PATH] [--stop-file PATH] [--start-timeout-s S] [--timeout-s S]";

static DATA_SOURCE: OnceLock<DataSource<'static>> = OnceLock::new();
static STARTED: AtomicBool = AtomicBool::new(false);
static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);
static STOP_GUARDS: Mutex<Vec<StopGuard>> = Mutex::new(Vec::new());
static FLUSHED: AtomicUsize = AtomicUsize::new(0);
static WRITER_DROPS: AtomicU64 = AtomicU64::new(0);

/// The data source written with the C SDK's inline API (cpp/c_writer.cc).
mod c_api {
    use std::ffi::{c_char, c_int, c_void};
    extern "C" {
        pub fn tbx_c_ds_register(name: *const c_char, policy: c_int) -> bool;
        pub fn tbx_c_ds_started() -> bool;
        pub fn tbx_c_ds_stop_requested() -> bool;
        pub fn tbx_c_ds_stop_done();
        pub fn tbx_c_ds_write_packet(
            thread: u32,
            seq: u32,
            last: bool,
            payload: *const u8,
            size: usize,
        );
        pub fn tbx_c_ds_flush(cb: extern "C" fn(*mut c_void), arg: *mut c_void) -> bool;
        pub fn tbx_c_ds_drop_count() -> u64;
    }
}

extern "C" fn on_c_flush_done(_: *mut std::ffi::c_void) {
    FLUSHED.fetch_add(1, Ordering::SeqCst);
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Api {
    Rust,
    C,
}

struct Opts {
    ds_name: String,
    threads: u32,
    /// Index of this process's first writer thread (several producers).
    thread_base: u32,
    packets: u32,
    size: usize,
    fixed_payload: bool,
    policy: String,
    api: Api,
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
    let api = match a.opt_str("--api").as_deref().unwrap_or("rust") {
        "rust" => Api::Rust,
        "c" => Api::C,
        x => a.usage_error(&format!("bad --api {x:?}")),
    };
    let o = Opts {
        api,
        ds_name: a
            .opt_str("--data-source")
            .unwrap_or_else(|| "tbx.sdk_test".into()),
        threads: a.opt_parse("--threads").unwrap_or(1),
        thread_base: a.opt_parse("--thread-base").unwrap_or(0),
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
    if o.thread_base.checked_add(o.threads).is_none() {
        a.usage_error("--thread-base + --threads overflows");
    }
    if o.threads == 0 || o.packets == 0 {
        a.usage_error("--threads and --packets must be > 0");
    }
    o
}

fn register(o: &Opts) {
    if o.api == Api::C {
        let name = std::ffi::CString::new(o.ds_name.as_str()).expect("name has a NUL byte");
        let policy = match o.policy.as_str() {
            "drop" => 0,
            "stall-abort" => 1,
            _ => 2,
        };
        // SAFETY: `name` is a valid C string for the duration of the call.
        if !unsafe { c_api::tbx_c_ds_register(name.as_ptr(), policy) } {
            eprintln!("sdk-producer: cannot register {}", o.ds_name);
            std::process::exit(1);
        }
        println!("sdk-producer: registered data_source={} api=c", o.ds_name);
        return;
    }
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

fn started(api: Api) -> bool {
    // SAFETY: reads an atomic in c_writer.cc.
    STARTED.load(Ordering::SeqCst) || (api == Api::C && unsafe { c_api::tbx_c_ds_started() })
}

fn stop_requested(api: Api) -> bool {
    // SAFETY: reads an atomic in c_writer.cc.
    STOP_REQUESTED.load(Ordering::SeqCst)
        || (api == Api::C && unsafe { c_api::tbx_c_ds_stop_requested() })
}

struct Shared {
    start: Barrier,
    written: Barrier,
    release: AtomicBool,
}

fn write_and_flush_c(o: &Opts, thread: u32, sh: &Shared, buf: &mut [u8]) {
    sh.start.wait();
    for seq in 0..o.packets {
        if !o.fixed_payload {
            fill_payload(thread, seq, buf);
        }
        let last = seq + 1 == o.packets;
        // SAFETY: `buf` is valid for `buf.len()` bytes during the call.
        unsafe { c_api::tbx_c_ds_write_packet(thread, seq, last, buf.as_ptr(), buf.len()) };
    }
    sh.written.wait();
    // SAFETY: plain calls into c_writer.cc; the callback is a static fn.
    unsafe {
        WRITER_DROPS.fetch_add(c_api::tbx_c_ds_drop_count(), Ordering::SeqCst);
        if !c_api::tbx_c_ds_flush(on_c_flush_done, std::ptr::null_mut()) {
            FLUSHED.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn writer_thread(o: Arc<Opts>, thread: u32, sh: Arc<Shared>) {
    let mut buf = vec![0u8; o.size];
    if o.fixed_payload {
        fill_payload(thread, 0, &mut buf);
    }
    if o.api == Api::C {
        write_and_flush_c(&o, thread, &sh, &mut buf);
        while !sh.release.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        return;
    }
    let ds = DATA_SOURCE.get().expect("registered");
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
    ds.trace(|ctx| {
        if !asked {
            asked = true;
            ctx.flush(|| {
                FLUSHED.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    if !asked {
        // Data source already stopped: nothing to flush.
        FLUSHED.fetch_add(1, Ordering::SeqCst);
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
        || started(o.api),
    );
    if end != WaitEnd::Condition {
        eprintln!("sdk-producer: data source not started ({end:?})");
        std::process::exit(3);
    }

    let n = o.threads as usize;
    let sh = Arc::new(Shared {
        start: Barrier::new(n + 1),
        written: Barrier::new(n + 1),
        release: AtomicBool::new(false),
    });
    let handles: Vec<_> = (0..o.threads)
        .map(|t| {
            let (o, sh) = (Arc::clone(&o), Arc::clone(&sh));
            let index = o.thread_base + t;
            std::thread::spawn(move || writer_thread(o, index, sh))
        })
        .collect();
    let cpu0 = self_usage();
    sh.start.wait();
    let w0 = Instant::now();
    sh.written.wait();
    let write_s = w0.elapsed().as_secs_f64();
    let cpu1 = self_usage();
    let flush_end = wait_until(None, Some(Instant::now() + Duration::from_secs(10)), || {
        FLUSHED.load(Ordering::SeqCst) == n
    });
    let flush_s = w0.elapsed().as_secs_f64() - write_s;

    let total = u64::from(o.threads) * u64::from(o.packets);
    let packet_bytes: u64 = (o.thread_base..o.thread_base + o.threads)
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
         cpu_s={:.3} api={} writer_drops={}",
        o.threads,
        o.packets,
        o.size,
        flush_end == WaitEnd::Condition,
        total as f64 / write_s,
        packet_bytes as f64 / write_s,
        (cpu1.user_s + cpu1.sys_s) - (cpu0.user_s + cpu0.sys_s),
        if o.api == Api::C { "c" } else { "rust" },
        if o.api == Api::C {
            WRITER_DROPS.load(Ordering::SeqCst).to_string()
        } else {
            "unknown".to_string()
        },
    );
    if let Some(p) = &o.done_file {
        if let Err(e) = std::fs::write(p, b"done\n") {
            eprintln!("sdk-producer: cannot write {}: {e}", p.display());
        }
    }

    let end = wait_until(o.stop_file.as_ref(), Some(deadline), || {
        stop_requested(o.api)
    });
    sh.release.store(true, Ordering::SeqCst);
    for h in handles {
        let _ = h.join();
    }
    STOP_GUARDS.lock().unwrap().clear();
    if o.api == Api::C {
        // SAFETY: acknowledges the stops postponed in c_writer.cc.
        unsafe { c_api::tbx_c_ds_stop_done() };
    }
    println!("sdk-producer: exit reason={end:?}");
    if end == WaitEnd::Timeout {
        std::process::exit(4);
    }
    // Let the stop acknowledgement reach the service before the process dies.
    std::thread::sleep(Duration::from_millis(100));
}

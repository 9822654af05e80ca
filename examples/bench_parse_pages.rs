//! Parse-and-encode cost per event of traced_probes' page translator, on
//! pages captured from this kernel (a developer benchmark: compare two
//! commits on the same capture; scripts/bench/ftrace.sh has the peer).
//!
//! `bench_parse_pages capture pingpong|marker FILE`
//!   Records sched_switch, sched_waking and ftrace/print into a fresh
//!   tracefs instance for 2 s of `bench_load` (found next to this binary),
//!   then saves the raw pages of every cpu to FILE.
//!
//! `bench_parse_pages run FILE [ITERS]`
//!   Translates FILE's pages into bundles ITERS times (default 50), compact
//!   sched on, in 32-page steps as a drain does, and prints
//!   `events=.. pages=.. best_ns_per_event=..`.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::process::{Command, ExitCode};
use std::time::Instant;

use tracebox::protozero::VecStream;
use tracebox::traced_probes::ftrace::parse::bundle::{
    write_pages, BundleContext, CpuState, EventFilter, PacketWriter,
};
use tracebox::traced_probes::ftrace::{parse::compact_sched, Tracefs};

const INSTANCE: &str = "tbx_bench_parse_pages";
const EVENTS: [(&str, &str); 3] = [
    ("sched", "sched_switch"),
    ("sched", "sched_waking"),
    ("ftrace", "print"),
];
/// Pages per translator call, as in a drain.
const STEP_PAGES: usize = 32;

/// Counts packet bytes and keeps the optimizer from dropping them.
#[derive(Default)]
struct Sink {
    bytes: usize,
    s: VecStream,
}

impl PacketWriter for Sink {
    type Stream = VecStream;
    fn new_packet(&mut self) {
        self.s.clear();
    }
    fn stream(&mut self) -> &mut VecStream {
        &mut self.s
    }
    fn finish_packet(&mut self) {
        self.bytes += std::hint::black_box(self.s.as_bytes()).len();
    }
}

fn capture(load: &str, file: &str) -> Result<(), String> {
    let root = Tracefs::discover().map_err(|e| format!("tracefs: {e}"))?;
    let _ = root.remove_instance(INSTANCE);
    let t = root
        .create_instance(INSTANCE)
        .map_err(|e| format!("instance: {e}"))?;
    let result = (|| {
        t.set_buffer_size_kb(16384)
            .map_err(|e| format!("buffer_size_kb: {e}"))?;
        // ftrace/print is always on (its enable file refuses writes).
        for (g, e) in &EVENTS[..2] {
            t.enable_event(g, e)
                .map_err(|err| format!("{g}/{e}: {err}"))?;
        }
        t.set_tracing_on(true)
            .map_err(|e| format!("tracing_on: {e}"))?;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(exe.with_file_name("bench_load"));
        match load {
            "pingpong" => cmd.args(["pingpong", "2"]),
            "marker" => {
                let marker = t.path("trace_marker");
                cmd.arg("marker").arg(marker).args(["1", "300000", "2"])
            }
            other => return Err(format!("unknown load {other:?}")),
        };
        let status = cmd.status().map_err(|e| format!("bench_load: {e}"))?;
        t.set_tracing_on(false).map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("bench_load: {status}"));
        }
        let page_size = t.page_header_layout().page_size;
        let mut all = Vec::new();
        for cpu in 0..t.num_cpus().map_err(|e| e.to_string())? {
            let mut f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(t.trace_pipe_raw_path(cpu))
                .map_err(|e| format!("cpu{cpu} trace_pipe_raw: {e}"))?;
            let mut page = vec![0u8; page_size];
            while let Ok(n @ 1..) = f.read(&mut page) {
                page[n..].fill(0);
                all.extend_from_slice(&page);
            }
        }
        std::fs::write(file, &all).map_err(|e| format!("{file}: {e}"))?;
        eprintln!("saved {} pages to {file}", all.len() / page_size);
        Ok(())
    })();
    let _ = t.set_tracing_on(false);
    drop(t);
    let _ = root.remove_instance(INSTANCE);
    result
}

fn run(file: &str, iters: usize) -> Result<(), String> {
    let pages = std::fs::read(file).map_err(|e| format!("{file}: {e}"))?;
    // Formats come from the live kernel, which must be the capture's.
    let t = Tracefs::discover().map_err(|e| format!("tracefs: {e}"))?;
    let layout = t.page_header_layout();
    let table = t.translation_table();
    let mut filter = EventFilter::default();
    for (g, e) in EVENTS {
        let ev = table.event_by_name(g, e).ok_or(format!("no {g}/{e}"))?;
        filter.enable(ev.ftrace_id);
    }
    let compact = compact_sched::for_table(&table);
    let ctx = BundleContext {
        table: &table,
        filter: &filter,
        compact_sched: compact,
        sched_switch: compact.map(|c| c.switch),
        clock: None,
        ksyms: None,
    };
    let mut state = CpuState::default();
    let mut sink = Sink::default();
    let (mut best, mut events) = (f64::MAX, 0);
    for _ in 0..iters.max(1) {
        let start = Instant::now();
        events = 0;
        for step in pages.chunks(STEP_PAGES * layout.page_size) {
            events += write_pages(&mut sink, 0, step, &layout, &ctx, &mut state).events;
            state.metadata.clear();
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    if events == 0 {
        return Err("no events in the capture".into());
    }
    println!(
        "events={events} pages={} compact_sched={} best_ns_per_event={:.1}",
        pages.len() / layout.page_size,
        compact.is_some(),
        best * 1e9 / events as f64
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = match args.as_slice() {
        ["capture", load, file] => capture(load, file),
        ["run", file] => run(file, 50),
        ["run", file, iters] => iters
            .parse()
            .map_err(|_| format!("bad ITERS {iters:?}"))
            .and_then(|n| run(file, n)),
        _ => Err("usage: bench_parse_pages capture pingpong|marker FILE | run FILE [ITERS]".into()),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_parse_pages: {e}");
            ExitCode::FAILURE
        }
    }
}

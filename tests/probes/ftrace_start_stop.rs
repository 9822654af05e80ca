//! The edges of an ftrace session through traced_probes, in private
//! tracefs instances: a clean start (nothing from before the session in
//! the buffer or in the start stats, buffer sizes reported) and no tail
//! at stop (the last flush reads every cpu buffer with tracing off).

use crate::support::probes as traced_probes_common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use quick_protobuf::{BytesReader, MessageRead};
use tracebox::pb::protos::mod_FtraceEvent::OneOfevent;
use tracebox::pb::protos::mod_FtraceStats::Phase;
use tracebox::pb::protos::mod_TracePacket::OneOfdata;
use tracebox::pb::protos::{FtraceStats, Trace};
use tracebox::traced_probes::ftrace::Tracefs;
use traced_probes_common::*;

/// Markers and ftrace_stats of a trace.
#[derive(Default)]
struct Seen {
    markers: Vec<String>,
    start: Option<FtraceStats>,
    end: Option<FtraceStats>,
}

fn read_trace(path: &Path) -> Seen {
    let bytes = std::fs::read(path).unwrap();
    let trace = Trace::from_reader(&mut BytesReader::from_bytes(&bytes), &bytes).unwrap();
    let mut seen = Seen::default();
    for p in trace.packet {
        match p.data {
            OneOfdata::ftrace_events(b) => {
                for e in b.event {
                    if let OneOfevent::print(p) = e.event {
                        seen.markers
                            .push(p.buf.unwrap_or_default().trim().to_string());
                    }
                }
            }
            OneOfdata::ftrace_stats(s) => match s.phase {
                Some(Phase::START_OF_TRACE) => seen.start = Some(s),
                Some(Phase::END_OF_TRACE) => seen.end = Some(s),
                _ => {}
            },
            _ => {}
        }
    }
    seen
}

/// Runs `perfetto` with a linux.ftrace config on `instance` in the
/// background; its stderr goes to consumer.log.
fn start_perfetto(dir: &Path, socks: &Sockets, instance: &str, extra: &str) -> Proc {
    let cfg = dir.join("config.txt");
    std::fs::write(
        &cfg,
        format!(
            r#"duration_ms: 2000
buffers {{ size_kb: 16384 fill_policy: DISCARD }}
data_sources {{ config {{ name: "linux.ftrace" ftrace_config {{
    ftrace_events: "ftrace/print"
    ftrace_events: "sched/sched_switch"
    buffer_size_kb: 1024
    instance_name: "{instance}"
    {extra} }} }} }}
"#
        ),
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .args(["perfetto", "--txt", "-c"])
        .arg(&cfg)
        .arg("-o")
        .arg(dir.join("trace.pb"))
        .env("PERFETTO_CONSUMER_SOCK_NAME", &socks.consumer)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("consumer.log")).unwrap())
        .spawn()
        .unwrap();
    Proc {
        child,
        name: "perfetto",
    }
}

/// Waits until the session on `instance` started: a new instance starts
/// with tracing on, but setup turns it off before enabling the events.
fn wait_started(instance: &str) {
    wait_until(Duration::from_secs(30), "ftrace start", || {
        let d = instance_dir(instance);
        read_trim(d.join("tracing_on")) == "1"
            && read_trim(d.join("events/sched/sched_switch/enable")) == "1"
    });
}

fn with_dir(f: impl FnOnce(&Path)) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(dir)));
    if let Err(e) = r {
        dump(dir);
        std::panic::resume_unwind(e);
    }
}

/// 1024 KiB per cpu in ring-buffer pages.
fn expected_pages(t: &Tracefs) -> u32 {
    (1024 * 1024 / t.ring_buffer_page_size().unwrap_or(4096)) as u32
}

#[test]
fn a_session_starts_with_an_empty_buffer_and_reports_its_size() {
    let instance = "tbx_probes_clean_start";
    let root = Tracefs::discover().expect("tracefs (tests run as root)");
    let _ = root.remove_instance(instance);
    // An instance with events of its own from before the session.
    let t = root.create_instance(instance).unwrap();
    // Already the session's size: a resize would renew the pages.
    t.set_buffer_size_kb(1024).unwrap();
    t.set_clock("boot").unwrap();
    t.set_tracing_on(true).unwrap();
    for i in 0..50 {
        t.write_trace_marker(&format!("tbx-before {i}")).unwrap();
    }
    let filled = (0..t.num_cpus().unwrap())
        .map(|c| t.cpu_stats(c).unwrap())
        .collect::<Vec<_>>();
    assert!(filled.iter().any(|s| s.entries > 0), "{filled:?}");
    let before_session = filled.iter().map(|s| s.now_ts).fold(0.0, f64::max);
    t.set_tracing_on(false).unwrap();

    with_dir(|dir| {
        let daemons = start_our_daemons(dir);
        let mut perfetto = start_perfetto(dir, &daemons.socks, instance, "");
        wait_started(instance);
        t.write_trace_marker("tbx-during").unwrap();
        let st = perfetto
            .wait_exit(Duration::from_secs(60))
            .expect("perfetto ends");
        assert!(st.success(), "perfetto: {st:?}");

        let seen = read_trace(&dir.join("trace.pb"));
        assert!(
            seen.markers.iter().any(|m| m == "tbx-during"),
            "{:?}",
            seen.markers
        );
        assert!(
            !seen.markers.iter().any(|m| m.starts_with("tbx-before")),
            "{:?}",
            seen.markers
        );
        let start = seen.start.expect("start-of-trace ftrace_stats");
        assert!(!start.cpu_stats.is_empty());
        for c in &start.cpu_stats {
            let oldest = c.oldest_event_ts.unwrap_or(0.0);
            assert!(
                oldest == 0.0 || oldest >= before_session,
                "cpu {:?}: oldest event {oldest} is from before the session ({before_session})",
                c.cpu
            );
        }
        let pages = expected_pages(&t);
        for s in [
            &start,
            seen.end.as_ref().expect("end-of-trace ftrace_stats"),
        ] {
            // What we set, and what the kernel made of it (it rounds up to
            // whole pages of data: 1024 KiB gives 257 pages of 4080 bytes).
            assert_eq!(s.cached_cpu_buffer_size_pages, Some(pages), "{s:?}");
            let now = s.cpu_buffer_size_pages.expect("cpu_buffer_size_pages");
            assert!((pages..=pages + pages / 50 + 1).contains(&now), "{s:?}");
        }
    });
    // Not ours to remove for traced_probes (it existed): the test's.
    root.remove_instance(instance).expect("instance removable");
}

#[test]
fn the_last_flush_leaves_nothing_in_the_kernel_buffers() {
    let instance = "tbx_probes_no_tail";
    let _ = std::fs::remove_dir(instance_dir(instance));
    with_dir(|dir| {
        let daemons = start_our_daemons(dir);
        // A long drain period: the tail would wait in the kernel for it.
        let mut perfetto = start_perfetto(dir, &daemons.socks, instance, "drain_period_ms: 1000");
        wait_started(instance);
        // A steady load until tracing goes off (writes then fail): the
        // last marker that made it into the kernel must be in the trace.
        let mut marker = std::fs::OpenOptions::new()
            .write(true)
            .open(instance_dir(instance).join("trace_marker"))
            .unwrap();
        let mut last = None;
        for i in 0u64.. {
            if marker
                .write_all(format!("tbx-tail {i}").as_bytes())
                .is_err()
            {
                break;
            }
            last = Some(i);
            std::thread::sleep(Duration::from_micros(200));
        }
        drop(marker);
        let st = perfetto
            .wait_exit(Duration::from_secs(60))
            .expect("perfetto ends");
        assert!(st.success(), "perfetto: {st:?}");

        let last = last.expect("markers written while tracing");
        let seen = read_trace(&dir.join("trace.pb"));
        let want = format!("tbx-tail {last}");
        assert!(
            seen.markers.contains(&want),
            "{want} missing; last markers: {:?}",
            &seen.markers[seen.markers.len().saturating_sub(3)..]
        );
        let end = seen.end.expect("end-of-trace ftrace_stats");
        assert!(!end.cpu_stats.is_empty());
        for c in &end.cpu_stats {
            assert_eq!(c.entries, Some(0), "left in the kernel buffer: {c:?}");
        }
    });
}

/// `preserve_ftrace_buffer`: what the kernel recorded before the session
/// is in the trace, and the instance keeps its clock and buffer size
/// (changing either would empty the buffer); bundles say which clock.
#[test]
fn a_preserving_session_keeps_the_buffer_its_clock_and_size() {
    let instance = "tbx_probes_preserve";
    let root = Tracefs::discover().expect("tracefs (tests run as root)");
    let _ = root.remove_instance(instance);
    let t = root.create_instance(instance).unwrap();
    t.set_buffer_size_kb(512).unwrap();
    t.set_clock("local").unwrap();
    t.set_tracing_on(true).unwrap();
    for i in 0..50 {
        t.write_trace_marker(&format!("tbx-before {i}")).unwrap();
    }

    with_dir(|dir| {
        let daemons = start_our_daemons(dir);
        let mut perfetto = start_perfetto(
            dir,
            &daemons.socks,
            instance,
            "preserve_ftrace_buffer: true",
        );
        wait_started(instance);
        t.write_trace_marker("tbx-during").unwrap();
        let st = perfetto
            .wait_exit(Duration::from_secs(60))
            .expect("perfetto ends");
        assert!(st.success(), "perfetto: {st:?}");

        let seen = read_trace(&dir.join("trace.pb"));
        let before = seen
            .markers
            .iter()
            .filter(|m| m.starts_with("tbx-before"))
            .count();
        assert_eq!(before, 50, "{:?}", seen.markers);
        assert!(seen.markers.iter().any(|m| m == "tbx-during"));
        let end = seen.end.expect("end-of-trace ftrace_stats");
        assert_eq!(end.preserve_ftrace_buffer, Some(true));
        // The size found (512 KiB, which the kernel rounds up to whole
        // pages of data), not the config's 1024 KiB.
        let pages = (512 * 1024 / t.ring_buffer_page_size().unwrap_or(4096)) as u32;
        let cached = end.cached_cpu_buffer_size_pages.expect("cached size");
        assert!(
            (pages..=pages + pages / 50 + 1).contains(&cached),
            "{end:?}"
        );
        assert_eq!(end.cpu_buffer_size_pages, Some(cached), "{end:?}");
        let bytes = std::fs::read(dir.join("trace.pb")).unwrap();
        let trace = Trace::from_reader(&mut BytesReader::from_bytes(&bytes), &bytes).unwrap();
        let clocks: Vec<_> = trace
            .packet
            .iter()
            .filter_map(|p| match &p.data {
                OneOfdata::ftrace_events(b) => Some(b.ftrace_clock),
                _ => None,
            })
            .collect();
        assert!(!clocks.is_empty());
        assert!(
            clocks
                .iter()
                .all(|c| *c == Some(tracebox::pb::protos::FtraceClock::FTRACE_CLOCK_LOCAL)),
            "{clocks:?}"
        );
    });
    assert_eq!(t.clocks().unwrap().0, "local");
    root.remove_instance(instance).expect("instance removable");
}

/// This machine's kernel has neither kprobe_events nor the function_graph
/// tracer: a session asking for either records nothing from that source
/// and the end line says why, word for word.
#[test]
fn kprobes_and_function_graph_are_refused_where_the_kernel_lacks_them() {
    let root = Tracefs::discover().expect("tracefs (tests run as root)");
    if root.has_kprobe_events()
        || root
            .read_file("available_tracers")
            .unwrap_or_default()
            .contains("function_graph")
    {
        eprintln!("this kernel has kprobes or function_graph: the VM stage tests them");
        return;
    }
    let cases = [
        (
            "tbx_probes_no_kprobes",
            r#"kprobe_events { probe: "vfs_read" type: KPROBE_TYPE_BOTH }"#,
            "linux.ftrace setup error: kprobe_events: this kernel has no kprobe_events in \
             tracefs (CONFIG_KPROBE_EVENTS)",
        ),
        (
            "tbx_probes_no_funcgraph",
            r#"enable_function_graph: true function_filters: "vfs_read""#,
            "linux.ftrace setup error: enable_function_graph: ftrace instance \
             tbx_probes_no_funcgraph has no function_graph tracer (this kernel was built \
             without CONFIG_FUNCTION_GRAPH_TRACER)",
        ),
    ];
    for (instance, extra, want) in cases {
        with_dir(|dir| {
            let daemons = start_our_daemons(dir);
            let mut perfetto = start_perfetto(dir, &daemons.socks, instance, extra);
            perfetto
                .wait_exit(Duration::from_secs(60))
                .expect("perfetto ends");
            let log = std::fs::read_to_string(dir.join("consumer.log")).unwrap();
            let line = log
                .lines()
                .rfind(|l| l.starts_with("Trace stats:"))
                .unwrap_or_default();
            assert_eq!(
                line,
                format!("Trace stats: no data lost, but INCOMPLETE: {want}"),
                "{log}"
            );
            // Refused before the instance was touched, or restored after.
            assert!(!instance_dir(instance).exists(), "{instance} left behind");
        });
    }
}

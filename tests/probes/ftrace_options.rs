//! traced_probes (with our traced and perfetto CLI) honouring
//! symbolize_ksyms, syscall_events and print_filter on the real kernel,
//! in a private tracefs instance.

use crate::support::probes as traced_probes_common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use quick_protobuf::{BytesReader, MessageRead};
use tracebox::pb::protos::mod_FtraceEvent::OneOfevent;
use tracebox::pb::protos::mod_TracePacket::OneOfdata;
use tracebox::pb::protos::Trace;
use traced_probes_common::*;

const KPTR: &str = "/proc/sys/kernel/kptr_restrict";

#[test]
fn ksyms_syscalls_and_print_filter_through_traced_probes() {
    let instance = "tbx_probes_ftrace_opts";
    let _ = std::fs::remove_dir(instance_dir(instance));
    let kptr = std::fs::read_to_string(KPTR).unwrap();
    std::fs::write(KPTR, "0").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let r = std::panic::catch_unwind(|| run(instance, dir));
    std::fs::write(KPTR, kptr.trim()).unwrap();
    if let Err(e) = r {
        dump(dir);
        std::panic::resume_unwind(e);
    }
}

fn run(instance: &str, dir: &std::path::Path) {
    let daemons = start_our_daemons(dir);
    let socks = &daemons.socks;
    let cfg = dir.join("config.txt");
    std::fs::write(
        &cfg,
        format!(
            r#"duration_ms: 2500
buffers {{ size_kb: 16384 fill_policy: DISCARD }}
data_sources {{ config {{ name: "linux.ftrace" ftrace_config {{
    ftrace_events: "workqueue/workqueue_execute_start"
    ftrace_events: "ftrace/print"
    symbolize_ksyms: true
    syscall_events: "getpid"
    syscall_events: "tbx_no_such_syscall"
    print_filter {{ rules {{ prefix: "tbx-drop" allow: false }} }}
    instance_name: "{instance}"
    drain_period_ms: 50 }} }} }}
"#
        ),
    )
    .unwrap();
    let out = dir.join("trace.pb");
    let mut perfetto = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .args(["perfetto", "--txt", "-c"])
        .arg(&cfg)
        .arg("-o")
        .arg(&out)
        .env("PERFETTO_CONSUMER_SOCK_NAME", &socks.consumer)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("consumer.log")).unwrap())
        .spawn()
        .unwrap();
    // A new instance starts with tracing_on 1; setup turns it off and
    // resizes the buffer (writes then fail with EBADF) before enabling the
    // events, so on + an event enabled means started.
    wait_until(Duration::from_secs(30), "ftrace start", || {
        let d = instance_dir(instance);
        read_trim(d.join("tracing_on")) == "1"
            && read_trim(d.join("events/workqueue/workqueue_execute_start/enable")) == "1"
    });
    let me = nix::unistd::gettid().as_raw() as u32;
    for i in 0..20 {
        nix::unistd::getpid();
        let m = if i % 2 == 0 { "tbx-keep" } else { "tbx-drop" };
        std::fs::write(
            instance_dir(instance).join("trace_marker"),
            format!("{m} {i}"),
        )
        .unwrap();
        nix::unistd::sync();
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = perfetto.wait().unwrap();
    assert!(st.success(), "perfetto: {st:?}");

    let bytes = std::fs::read(&out).unwrap();
    let trace = Trace::from_reader(&mut BytesReader::from_bytes(&bytes), &bytes).unwrap();
    let getpid =
        tracebox::traced_probes::ftrace::parse::syscalls::syscall_number("getpid").unwrap() as i64;
    let (mut my_getpids, mut kept, mut dropped) = (0, 0, 0);
    let mut symbols: BTreeMap<u64, String> = BTreeMap::new();
    let mut functions = Vec::new();
    let mut failed = Vec::new();
    let mut parsed = Vec::new();
    for p in trace.packet {
        if let Some(d) = &p.interned_data {
            for s in &d.kernel_symbols {
                let name = String::from_utf8(s.str_pb.clone().unwrap().to_vec()).unwrap();
                symbols.insert(s.iid.unwrap(), name);
            }
        }
        match p.data {
            OneOfdata::ftrace_events(b) => {
                for e in b.event {
                    match e.event {
                        OneOfevent::sys_enter(s) => {
                            assert_eq!(s.id, Some(getpid));
                            if e.pid == Some(me) {
                                my_getpids += 1;
                            }
                        }
                        OneOfevent::sys_exit(s) => assert_eq!(s.id, Some(getpid)),
                        OneOfevent::print(p) => {
                            let buf = p.buf.unwrap_or_default();
                            kept += buf.starts_with("tbx-keep") as u32;
                            dropped += buf.starts_with("tbx-drop") as u32;
                        }
                        OneOfevent::workqueue_execute_start(w) => {
                            functions.push(w.function.unwrap())
                        }
                        _ => {}
                    }
                }
            }
            OneOfdata::ftrace_stats(s) => {
                parsed.push(s.kernel_symbols_parsed.unwrap_or(0));
                failed.extend(s.failed_ftrace_events)
            }
            _ => {}
        }
    }
    assert!(my_getpids >= 20, "{my_getpids} getpid enters");
    assert_eq!((kept, dropped), (10, 0));
    assert!(!functions.is_empty(), "no workqueue events");
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap();
    for f in &functions {
        let name = symbols
            .get(f)
            .unwrap_or_else(|| panic!("iid {f} not interned"));
        let needle = format!(" {name}");
        assert!(kallsyms.contains(&needle), "{name} not in kallsyms");
    }
    assert!(
        !parsed.is_empty() && parsed.iter().all(|&n| n > 1000),
        "kernel_symbols_parsed {parsed:?}"
    );
    assert!(
        failed.iter().any(|f| f == "tbx_no_such_syscall"),
        "{failed:?}"
    );
}

/// atrace on Linux: a note in the log, once per process, and tracing goes on.
#[test]
fn atrace_note_is_logged_once() {
    let instance = "tbx_probes_atrace_note";
    let _ = std::fs::remove_dir(instance_dir(instance));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let daemons = start_our_daemons(dir);
    let socks = &daemons.socks;
    let log = dir.join("probes.log");
    let source = format!(
        r#"data_sources {{ config {{ name: "linux.ftrace" ftrace_config {{
    atrace_categories: "sched" atrace_apps: "*" instance_name: "{instance}" }} }} }}"#
    );
    let cfg = dir.join("config.txt");
    std::fs::write(
        &cfg,
        format!("duration_ms: 300\nbuffers {{ size_kb: 4096 }}\n{source}\n{source}\n"),
    )
    .unwrap();
    for _ in 0..2 {
        let st = Command::new(env!("CARGO_BIN_EXE_tracebox"))
            .args(["perfetto", "--txt", "-c"])
            .arg(&cfg)
            .arg("-o")
            .arg(dir.join("trace.pb"))
            .env("PERFETTO_CONSUMER_SOCK_NAME", &socks.consumer)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success());
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let n = text.matches("atrace is Android-only").count();
    assert_eq!(n, 1, "log:\n{text}");
}

//! The perfetto client's end-of-trace line names events the kernel lost.
//! traced_probes is stopped (SIGSTOP) while markers flood a small buffer
//! of a private tracefs instance, so the kernel overwrites some of them.
//! Every marker is then either in the trace or in the line's count: the
//! two add up to the number written. Both ways of getting the trace out
//! (ReadBuffers and write_into_file) are checked.

use crate::support::probes as traced_probes_common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use quick_protobuf::{BytesReader, MessageRead};
use tracebox::pb::protos::mod_FtraceEvent::OneOfevent;
use tracebox::pb::protos::mod_TracePacket::OneOfdata;
use tracebox::pb::protos::Trace;
use traced_probes_common::*;

const MARKERS: u64 = 4000;

/// Which service the client and traced_probes talk to.
#[derive(Clone, Copy, PartialEq)]
enum Service {
    Ours,
    /// Perfetto's own traced (tests/sdk-interop): it cuts packets into
    /// ReadBuffers slices its own way.
    Real,
}

#[test]
fn kernel_losses_reach_the_end_line_via_read_buffers() {
    check_case("tbx_cli_kloss_rb", false, Service::Ours);
}

#[test]
fn kernel_losses_reach_the_end_line_via_write_into_file() {
    check_case("tbx_cli_kloss_wif", true, Service::Ours);
}

#[test]
fn kernel_losses_reach_the_end_line_through_a_real_traced() {
    check_case("tbx_cli_kloss_real", false, Service::Real);
}

/// Issue 33, defect 6: a detached session's end line, printed by the
/// client that attaches, reads the file back as a plain recording does
/// (it said `nothing lost` over the kernel's losses).
#[test]
fn kernel_losses_reach_the_end_line_of_an_attached_client() {
    let (lost, captured, overrun) = run_case("tbx_cli_kloss_att", Mode::Attach, Service::Ours);
    assert!(overrun > 0, "the kernel overwrote nothing");
    assert!(lost >= overrun, "line says {lost}, the kernel {overrun}");
    assert_eq!(lost + captured, MARKERS);
}

/// How the trace gets out.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    ReadBuffers,
    WriteIntoFile,
    /// write_into_file, `--detach=KEY`, then `--attach=KEY` once the
    /// session ended.
    Attach,
}

fn check_case(instance: &str, write_into_file: bool, service: Service) {
    let mode = match write_into_file {
        true => Mode::WriteIntoFile,
        false => Mode::ReadBuffers,
    };
    let (lost, captured, overrun) = run_case(instance, mode, service);
    assert!(overrun > 0, "the kernel overwrote nothing");
    assert!(lost >= overrun, "line says {lost}, the kernel {overrun}");
    assert_eq!(lost + captured, MARKERS);
}

#[test]
fn a_trace_without_kernel_loss_says_nothing_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let daemons = start_our_daemons(dir);
    let socks = &daemons.socks;
    let instance = "tbx_cli_kloss_none";
    let _ = std::fs::remove_dir(instance_dir(instance));
    let cfg = config(dir, instance, true, 4096);
    let out = dir.join("trace.pb");
    let o = perfetto(socks, &cfg, &out).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(says_nothing_lost(&err), "{err}");
    wait_until(Duration::from_secs(10), "the instance removed", || {
        !instance_dir(instance).exists()
    });
}

/// Returns (events the line says the kernel lost, markers in the trace,
/// overrun read from tracefs while traced_probes was stopped).
fn run_case(instance: &str, mode: Mode, service: Service) -> (u64, u64, u64) {
    let _ = std::fs::remove_dir(instance_dir(instance));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let r = std::panic::catch_unwind(|| flood_while_stopped(dir, instance, mode, service));
    if r.is_err() {
        dump(dir);
    }
    r.unwrap_or_else(|e| std::panic::resume_unwind(e))
}

fn flood_while_stopped(
    dir: &Path,
    instance: &str,
    mode: Mode,
    service: Service,
) -> (u64, u64, u64) {
    let write_into_file = mode != Mode::ReadBuffers;
    let socks = &Sockets::in_dir(dir);
    let _traced = match service {
        Service::Ours => start_our_traced(socks, &dir.join("traced.log")),
        Service::Real => {
            let bin = interop_bin("real-traced").unwrap();
            start_real_traced(&bin, socks, &dir.join("traced.log"))
        }
    };
    let probes = &start_probes(
        &socks.producer,
        &dir.join("state"),
        &[],
        &dir.join("probes.log"),
        true,
    );
    let cfg = config(dir, instance, write_into_file, 16);
    let out = dir.join("trace.pb");
    let mut client = perfetto(socks, &cfg, &out);
    if mode == Mode::Attach {
        client.arg("--detach=kloss");
    }
    let mut client = client
        .stderr(std::fs::File::create(dir.join("consumer.log")).unwrap())
        .spawn()
        .unwrap();
    let idir = instance_dir(instance);
    // ftrace/print has no enable file: the debug log says when it started.
    wait_ftrace_started(dir, instance);
    // Let the start stats and setup settle, then freeze the reader.
    std::thread::sleep(Duration::from_millis(300));
    probes.signal(Signal::SIGSTOP);
    // kill() returns before every thread has stopped: on a busy machine a
    // reader thread could still drain the buffer while the flood begins.
    wait_until(Duration::from_secs(10), "traced_probes stopped", || {
        all_threads_stopped(probes.child.id())
    });
    let marker = std::fs::OpenOptions::new()
        .write(true)
        .open(idir.join("trace_marker"))
        .unwrap();
    use std::io::Write;
    for i in 0..MARKERS {
        (&marker)
            .write_all(format!("tbx-kloss {i:05}").as_bytes())
            .unwrap();
    }
    // An open file of the instance would keep traced_probes from
    // removing it at the end (EBUSY).
    drop(marker);
    let overrun = overrun_sum(&idir);
    probes.signal(Signal::SIGCONT);
    let status = client.wait().unwrap();
    let mut err = std::fs::read_to_string(dir.join("consumer.log")).unwrap();
    assert!(status.success(), "{err}");
    if mode == Mode::Attach {
        // Attach once the session has ended (its instance is gone), so
        // the file is read back after traced closed it.
        wait_until(Duration::from_secs(20), "the session ended", || {
            !idir.exists()
        });
        let o = Command::new(env!("CARGO_BIN_EXE_tracebox"))
            .args(["perfetto", "--attach=kloss"])
            .env("PERFETTO_CONSUMER_SOCK_NAME", &socks.consumer)
            .output()
            .unwrap();
        err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{err}");
    }
    let (lost, captured) = (lost_in_line(&err), markers_in(&out));
    // The session's end takes its instance down; a test that dropped
    // traced_probes before that would leave the instance behind.
    wait_until(Duration::from_secs(10), "the instance removed", || {
        !idir.exists()
    });
    eprintln!("kernel lost {lost} (overrun {overrun} while stopped), {captured} in the trace");
    (lost, captured, overrun)
}

fn config(dir: &Path, instance: &str, write_into_file: bool, buffer_kb: u32) -> std::path::PathBuf {
    let cfg = dir.join("config.txt");
    std::fs::write(
        &cfg,
        format!(
            r#"duration_ms: 3000
write_into_file: {write_into_file}
file_write_period_ms: 500
buffers {{ size_kb: 8192 fill_policy: DISCARD }}
data_sources {{ config {{ name: "linux.ftrace" ftrace_config {{
    ftrace_events: "ftrace/print"
    buffer_size_kb: {buffer_kb}
    instance_name: "{instance}"
    drain_period_ms: 100 }} }} }}
"#
        ),
    )
    .unwrap();
    cfg
}

fn perfetto(socks: &Sockets, cfg: &Path, out: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tracebox"));
    c.args(["perfetto", "--txt", "-c"])
        .arg(cfg)
        .arg("-o")
        .arg(out)
        .env("PERFETTO_CONSUMER_SOCK_NAME", &socks.consumer)
        .stdout(Stdio::null());
    c
}

/// Every thread of `pid` is in the stopped state (`T` in its stat).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|t| {
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        // "pid (comm) S ...": the state follows the last ')'.
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
    })
}

fn overrun_sum(instance: &Path) -> u64 {
    let cpus = std::fs::read_dir(instance.join("per_cpu")).unwrap();
    cpus.map(|e| {
        let stats = std::fs::read_to_string(e.unwrap().path().join("stats")).unwrap();
        tracebox::traced_probes::ftrace::tracefs::CpuStats::parse(&stats).overrun
    })
    .sum()
}

/// N from "Trace stats: LOST N ftrace events in the kernel ...".
fn lost_in_line(stderr: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("Trace stats: "))
        .unwrap_or_else(|| panic!("no end line in {stderr:?}"));
    let rest = line
        .strip_prefix("Trace stats: LOST ")
        .unwrap_or_else(|| panic!("no loss in {line:?}"));
    let n = rest.split(' ').next().unwrap();
    assert!(
        rest[n.len()..].starts_with(" ftrace events in the kernel"),
        "{line}"
    );
    n.parse().unwrap()
}

fn markers_in(trace: &Path) -> u64 {
    let bytes = std::fs::read(trace).unwrap();
    let trace = Trace::from_reader(&mut BytesReader::from_bytes(&bytes), &bytes).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for p in trace.packet {
        if let OneOfdata::ftrace_events(b) = p.data {
            for e in b.event {
                if let OneOfevent::print(p) = e.event {
                    let buf = p.buf.unwrap_or_default();
                    if let Some(i) = buf.strip_prefix("tbx-kloss ") {
                        assert!(seen.insert(i.trim().to_owned()), "{buf} twice");
                    }
                }
            }
        }
    }
    seen.len() as u64
}

//! Runs one tracing session as a consumer: EnableTracing, wait (showing
//! live status on a terminal, stopping gracefully on the first Ctrl-C),
//! then read the buffers into the output file.

use std::fs::File;
use std::io::{IsTerminal, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use super::kernel_loss::KernelLoss;
use super::options::{Output, TracePlan};
use super::output;
use super::packet_writer::PacketWriter;
use super::rotate::Rotation;
use super::rpc::{decode, Port};
use super::signals::{self, StopSignals};
use super::snapshots::Snapshots;
use super::start_problems::StartProblems;
use super::status_line;
use crate::base::unix_socket::wait_readable_any;
use crate::ipc::client::{ClientError, ClientReply};
use crate::pb::protos::{
    mod_EnableTracingResponse::OneOfstate, mod_ObservableEvents::Type as ObservableType,
    DetachRequest, DisableTracingRequest, EnableTracingResponse, FlushRequest, FreeBuffersRequest,
    GetTraceStatsRequest, GetTraceStatsResponse, ObserveEventsRequest, ObserveEventsResponse,
    ReadBuffersRequest, ReadBuffersResponse, TraceConfig,
};
use crate::protozero::{put_bytes, put_varint, VecStream};

const READ_WATCHDOG: Duration = Duration::from_secs(30);
const STATUS_PERIOD: Duration = Duration::from_secs(1);
/// FlushFlags: reason = trace stop (2), initiator = perfetto_cmd (2).
const FLUSH_FLAGS_STOP_FROM_CMD: u64 = 2 | (2 << 4);

/// Reports "all data sources started" (status 0) or failure (1) once, to
/// `--notify-fd` or the `-D` parent.
pub struct ReadyNotifier(pub Option<OwnedFd>);

impl ReadyNotifier {
    fn send(&mut self, status: u8) {
        if let Some(fd) = self.0.take() {
            let _ = File::from(fd).write_all(&[status]);
        }
    }
}

/// EnableTracingRequest with the config passed through as raw bytes, so
/// fields this build does not know reach the service.
fn enable_request(config: &[u8], attach_notification_only: bool) -> Vec<u8> {
    let mut s = VecStream::new();
    if !attach_notification_only {
        put_bytes(&mut s, 1, config);
    } else {
        put_varint(&mut s, 2, 1);
    }
    s.into_bytes()
}

/// The longest we wait for the service to end the session on its own.
fn failsafe_ms(plan: &TracePlan) -> Option<u64> {
    let c = &plan.config;
    let trigger = c.trigger_config.as_ref().map_or(0, |t| {
        t.trigger_timeout_ms.unwrap_or(0) as u64
            + t.triggers
                .iter()
                .map(|x| x.stop_delay_ms.unwrap_or(0) as u64)
                .max()
                .unwrap_or(0)
    });
    let expected = c.duration_ms.unwrap_or(0) as u64 + trigger;
    (expected > 0).then(|| {
        expected
            + 60_000
            + c.flush_timeout_ms.unwrap_or(5000) as u64
            + c.data_source_stop_timeout_ms.unwrap_or(5000) as u64
    })
}

/// Runs the session described by `plan` against the consumer socket.
/// Returns the exit status.
pub fn run(
    plan: &TracePlan,
    socket: &str,
    signals: &mut StopSignals,
    mut ready: ReadyNotifier,
) -> i32 {
    let write_into_file = plan.config.write_into_file == Some(true);
    signals::name_output(&match &plan.output {
        Some(Output::File { path, .. }) => path.clone(),
        Some(Output::Stdout) => "stdout".to_owned(),
        None => "the trace".to_owned(),
    });
    // With rotation the first file is opened once the service is known to
    // rotate.
    let direct_output = plan.output.as_ref().filter(|_| plan.rotate.is_none());
    let out_file = match direct_output.map(output::open).transpose() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{e}");
            ready.send(1);
            return 1;
        }
    };
    let mut port = match Port::connect(socket, "ConsumerPort") {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            plan.output.as_ref().map(output::remove_if_empty);
            ready.send(1);
            return 1;
        }
    };
    let mut rotation = None;
    let mut out_file = out_file;
    if let (Some(r), Some(out)) = (&plan.rotate, &plan.output) {
        let period = plan.config.file_write_period_ms.unwrap_or(5000) as u64;
        match Rotation::start(r, out, &port, period) {
            Ok((rot, first)) => {
                rotation = Some(rot);
                out_file = Some(first);
            }
            Err(e) => {
                eprintln!("{e}");
                ready.send(1);
                return 1;
            }
        }
    }
    // Subscribe before enabling, so no event can slip by.
    let snaps = Snapshots::for_plan(plan, socket);
    // Instance changes carry what setup could not do (start_problems).
    let mut events = vec![ObservableType::TYPE_DATA_SOURCES_INSTANCES];
    if ready.0.is_some() {
        events.push(ObservableType::TYPE_ALL_DATA_SOURCES_STARTED);
    }
    if snaps.is_some() {
        events.push(ObservableType::TYPE_CLONE_TRIGGER_HIT);
    }
    let req = ObserveEventsRequest {
        events_to_observe: events,
    };
    let observe_id = port.start("ObserveEvents", &req, None).ok();
    let fd_for_service = match (&out_file, write_into_file) {
        (Some(f), true) => f.try_clone().ok().map(OwnedFd::from),
        _ => None,
    };
    if signals.interrupted_before_start() {
        eprintln!("{}", signals::BEFORE_START);
        plan.output.as_ref().map(output::remove_if_empty);
        ready.send(1);
        return 1;
    }
    let enable_id = match port.start_raw(
        "EnableTracing",
        enable_request(&plan.config_bytes, false),
        fd_for_service,
    ) {
        Ok(id) => id,
        Err(e) => {
            eprintln!("{e}");
            ready.send(1);
            return 1;
        }
    };
    if let Some(key) = &plan.detach_key {
        let req = DetachRequest {
            key: Some(key.clone()),
        };
        return match port.call::<_, crate::pb::protos::DetachResponse>("Detach", &req, None) {
            Ok(_) => 0,
            Err(_) => {
                eprintln!("Session detach failed");
                1
            }
        };
    }
    wait_and_collect(
        &mut port,
        enable_id,
        observe_id,
        plan,
        out_file,
        signals,
        &mut ready,
        snaps,
        rotation.as_mut(),
    )
}

/// Waits for the session to end (taking CLONE_SNAPSHOT snapshots on the
/// way), then writes the file. Shared with attach.
#[allow(clippy::too_many_arguments)]
pub fn wait_and_collect(
    port: &mut Port,
    enable_id: u64,
    observe_id: Option<u64>,
    plan: &TracePlan,
    out_file: Option<File>,
    signals: &mut StopSignals,
    ready: &mut ReadyNotifier,
    mut snaps: Option<Snapshots>,
    mut rotation: Option<&mut Rotation>,
) -> i32 {
    let mut problems = StartProblems::default();
    let mut strict_stop = false;
    let started = Instant::now();
    let failsafe = failsafe_ms(plan).map(Duration::from_millis);
    let total_ms = plan.config.duration_ms.unwrap_or(0) as u64;
    let show_status = std::io::stderr().is_terminal();
    let mut next_status = started;
    let mut stopping = false;

    let response = loop {
        // Sleep until the service says something, a stop signal comes or
        // the next status line or the failsafe is due; then look at what
        // arrived without waiting.
        let due = [
            show_status.then_some(next_status),
            failsafe.map(|f| started + f),
            rotation
                .as_ref()
                .filter(|_| !stopping)
                .and_then(|r| r.due()),
        ];
        let queued = std::iter::once(enable_id)
            .chain(observe_id)
            .any(|id| port.client.has_queued(id));
        let wait = if queued {
            Some(Duration::ZERO)
        } else {
            let next_due = due.into_iter().flatten().min();
            next_due.map(|t| t.saturating_duration_since(Instant::now()))
        };
        let fds = [port.client.socket().as_fd(), signals.fd()];
        if let Err(e) = wait_readable_any(&fds, wait) {
            eprintln!("Waiting for the traced service: {e}");
            ready.send(1);
            return 1;
        }
        port.client.set_timeout(Some(Duration::ZERO));
        match port.next(enable_id) {
            Ok(Some(ClientReply {
                success: true,
                payload,
                ..
            })) => break decode::<EnableTracingResponse>("EnableTracing", &payload),
            Ok(Some(_)) => break Err("EnableTracing failed".to_owned()),
            Ok(None) => break Err("EnableTracing ended without a reply".to_owned()),
            Err(ClientError::TimedOut) => {}
            Err(e) => {
                clear_status(show_status);
                eprintln!("Disconnected from the traced service ({e})");
                ready.send(1);
                return 1;
            }
        }
        if let Some(id) = observe_id {
            if let Ok(Some(r)) = port.next(id) {
                let ev = decode::<ObserveEventsResponse>("ObserveEvents", &r.payload)
                    .ok()
                    .and_then(|e| e.events)
                    .unwrap_or_default();
                let lines = problems.observe(&ev);
                if !lines.is_empty() {
                    clear_status(show_status);
                    for l in lines {
                        eprintln!("{l}");
                    }
                    strict_stop = plan.strict;
                }
                if ev.all_data_sources_started == Some(true) {
                    ready.send(0);
                }
                if let (Some(hit), Some(s)) = (&ev.clone_trigger_hit, snaps.as_mut()) {
                    clear_status(show_status);
                    s.take(hit);
                }
            }
        }
        if !stopping && (signals.received() || strict_stop) {
            stopping = true;
            clear_status(show_status);
            if strict_stop {
                eprintln!("--strict: stopping the trace (it would not record what was asked).");
            } else {
                eprintln!("SIGINT/SIGTERM received: disabling tracing.");
            }
            port.client.set_timeout(Some(Duration::from_secs(30)));
            let flush = FlushRequest {
                timeout_ms: Some(0),
                flags: Some(FLUSH_FLAGS_STOP_FROM_CMD),
            };
            if port
                .call::<_, crate::pb::protos::FlushResponse>("Flush", &flush, None)
                .is_err()
            {
                eprintln!("Final flush unsuccessful.");
            }
            let _ = port.start("DisableTracing", &DisableTracingRequest {}, None);
        }
        if let Some(r) = rotation.as_mut().filter(|_| !stopping) {
            r.poll(port);
        }
        if failsafe.is_some_and(|f| started.elapsed() > f) {
            clear_status(show_status);
            eprintln!("Timed out while waiting for trace from the service, aborting");
            return 1;
        }
        if show_status && Instant::now() >= next_status {
            next_status += STATUS_PERIOD;
            // Data waits in producers (traced_probes reads a quiet
            // kernel buffer every 2 s, chunks commit when full): a flush
            // each second brings it to traced, so the line shows what the
            // trace will hold, not 0 B.
            if !stopping {
                status_flush(port);
            }
            if let Some(f) = session_figures(port) {
                let file = out_file
                    .as_ref()
                    .filter(|_| plan.config.write_into_file == Some(true))
                    .and_then(|f| f.metadata().ok())
                    .filter(|m| m.is_file())
                    .map(|m| m.len());
                let elapsed = started.elapsed().as_millis() as u64;
                let line = status_line::render(elapsed, total_ms, f, file);
                eprint!("\r\x1b[K{line}");
            }
        }
    };
    clear_status(show_status);
    ready.send(1); // No-op if "started" was already reported.

    // --strict stopped the trace: the file is written, the run failed.
    let ok = i32::from(strict_stop);
    let clean_end = matches!(&response, Ok(r) if r.error.as_deref().unwrap_or("").is_empty());
    if let Some(s) = snaps.as_ref().filter(|_| clean_end) {
        return end_snapshot_session(port, plan, s).max(ok);
    }
    if let Some(s) = &snaps {
        s.report();
    }

    match response {
        Ok(EnableTracingResponse { error: Some(e), .. }) if e.starts_with(FILE_WRITE_FAILED) => {
            // The session ran and its file is cut at the last whole packet.
            eprintln!("Service error: {e}");
            let mut kernel = KernelLoss::default();
            if let Some(r) = rotation {
                kernel = rotated_files(r).0;
                r.report();
            } else if let Some(f) = out_file.filter(|f| f.metadata().is_ok_and(|m| m.is_file())) {
                let _ = kernel.scan_file(&f);
            }
            print_summary(port, &kernel, &plan.config, None, Some(FILE_CUT));
            return 1;
        }
        Ok(EnableTracingResponse { error: Some(e), .. }) if !e.is_empty() => {
            // Upstream exits 0 here; kept for scripts that rely on it.
            eprintln!("Service error: {e}");
            plan.output.as_ref().map(output::remove_if_empty);
            return 0;
        }
        Ok(EnableTracingResponse {
            state: OneOfstate::disabled(_),
            ..
        })
        | Ok(_) => {}
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    }
    if let Some(r) = rotation {
        let (kernel, size) = rotated_files(r);
        print_summary(port, &kernel, &plan.config, Some(size), None);
        r.report();
        return ok;
    }
    if plan.config.write_into_file == Some(true) {
        // traced has written and closed its side by now.
        let (kernel, size) = written_file_losses(out_file.as_ref());
        let unread = out_file.is_none().then_some(FILE_NOT_READ_BACK);
        print_summary(port, &kernel, &plan.config, size, unread);
        eprintln!("Trace written into the output file");
        return ok;
    }
    let Some(file) = out_file else {
        print_summary(port, &KernelLoss::default(), &plan.config, None, None);
        return ok;
    };
    match read_buffers(port, file) {
        Ok((bytes, _packets, kernel)) => {
            print_summary(port, &kernel, &plan.config, Some(bytes), None);
            let _ = port.start("FreeBuffers", &FreeBuffersRequest::default(), None);
            match &plan.output {
                Some(Output::File { path, .. }) => eprintln!("Wrote {bytes} bytes into {path}"),
                _ => eprintln!("Wrote {bytes} bytes into stdout"),
            }
            ok
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// A CLONE_SNAPSHOT session ended (at its trigger timeout, or stopped):
/// its trace is its snapshots (traced reads such a session only through
/// clones, as upstream), so the end line is the session's own losses and
/// the last line names the snapshot files. 0 when every snapshot was
/// written.
fn end_snapshot_session(port: &mut Port, plan: &TracePlan, snaps: &Snapshots) -> i32 {
    // `-o` stays the empty file it is, as upstream's perfetto leaves it:
    // the trace is the snapshots, which the last line names.
    print_summary(port, &KernelLoss::default(), &plan.config, None, None);
    snaps.report();
    i32::from(snaps.failed > 0)
}

/// Streams ReadBuffers into `file`. Returns (bytes, packets) written and
/// the kernel's ftrace losses seen on the way.
pub fn read_buffers(port: &mut Port, file: File) -> Result<(u64, u64, KernelLoss), String> {
    signals::writing_into(file.as_fd());
    let r = read_buffers_into(port, &file);
    signals::done_writing();
    r
}

/// Whole packets gathered before each write: what reached the file is
/// always whole packets but for the write in progress, which a later
/// interrupt cuts off (signals::whole_bytes).
const WRITE_BATCH: usize = 1 << 20;

fn read_buffers_into(port: &mut Port, mut file: &File) -> Result<(u64, u64, KernelLoss), String> {
    port.client.set_timeout(Some(READ_WATCHDOG));
    let id = port.start("ReadBuffers", &ReadBuffersRequest {}, None)?;
    let mut writer = PacketWriter::new(Vec::with_capacity(WRITE_BATCH + 4096));
    let mut on_disk = 0u64;
    let mut write_batch = |batch: &mut Vec<u8>| -> Result<(), String> {
        file.write_all(batch)
            .map_err(|e| format!("Failed to write packets: {e}"))?;
        on_disk += batch.len() as u64;
        signals::whole_bytes(on_disk);
        batch.clear();
        Ok(())
    };
    let mut kernel = KernelLoss::default();
    // The slices of the packet being reassembled (it may span replies).
    let mut parts: Vec<Vec<u8>> = Vec::new();
    loop {
        match port.next(id) {
            Ok(Some(r)) if r.success => {
                let resp: ReadBuffersResponse = decode("ReadBuffers", &r.payload)?;
                for slice in resp.slices {
                    parts.push(slice.data.unwrap_or_default());
                    if slice.last_slice_for_packet != Some(true) {
                        continue;
                    }
                    kernel.observe_packet(&parts);
                    writer
                        .write_packet(&parts)
                        .map_err(|e| format!("Failed to write packets: {e}"))?;
                    parts.clear();
                    if writer.out_mut().len() >= WRITE_BATCH {
                        write_batch(writer.out_mut())?;
                    }
                }
            }
            Ok(Some(_)) => return Err("ReadBuffers failed".into()),
            Ok(None) => break,
            Err(ClientError::TimedOut) => {
                return Err("Timed out while waiting for OnTraceData, aborting".into())
            }
            Err(e) => return Err(format!("Disconnected from the traced service ({e})")),
        }
    }
    let (bytes, packets) = (writer.bytes_written, writer.packets_written);
    write_batch(writer.out_mut())?;
    Ok((bytes, packets, kernel))
}

/// The kernel's losses read from the ftrace_stats of every rotated file,
/// oldest first (the first one as read before `--rotate-keep` removed
/// it), and their total size.
fn rotated_files(r: &mut Rotation) -> (KernelLoss, u64) {
    let mut kernel = std::mem::take(&mut r.kernel);
    let mut size = 0;
    for name in r.files() {
        if let Ok(f) = File::open(&name) {
            size += f.metadata().map_or(0, |m| m.len());
            if let Err(e) = kernel.scan_file(&f) {
                eprintln!("Could not read {name} back for its ftrace stats: {e}");
            }
        }
    }
    (kernel, size)
}

/// FlushFlags: reason = explicit (4), initiator = perfetto_cmd (2 << 4).
const FLUSH_FLAGS_STATUS: u64 = 4 | (2 << 4);

/// Asks producers to hand what they hold to traced (at most 1 s), for the
/// live line. A failure only makes the line lag.
fn status_flush(port: &mut Port) {
    port.client.set_timeout(Some(Duration::from_secs(2)));
    let flush = FlushRequest {
        timeout_ms: Some(1000),
        flags: Some(FLUSH_FLAGS_STATUS),
    };
    let _ = port.call::<_, crate::pb::protos::FlushResponse>("Flush", &flush, None);
}

/// The session's totals and losses (GetTraceStats, waiting at most 2 s).
fn session_figures(port: &mut Port) -> Option<status_line::Figures> {
    port.client.set_timeout(Some(Duration::from_secs(2)));
    let r = port.call::<_, GetTraceStatsResponse>("GetTraceStats", &GetTraceStatsRequest {}, None);
    Some(status_line::figures(
        &r.ok()?.trace_stats.unwrap_or_default(),
    ))
}

/// One line on stderr with the session's losses (the session has ended
/// but still exists, so its stats are final), the kernel's, and what was
/// asked for and not obtained. `bytes`: the trace's size, if known.
/// The end-of-trace line. `first`: a phrase that leads the line's
/// items (the output file could not be written to the end, or read back).
pub(super) fn print_summary(
    port: &mut Port,
    kernel: &KernelLoss,
    config: &TraceConfig,
    bytes: Option<u64>,
    first: Option<&str>,
) {
    let mut missing: Vec<String> = first.into_iter().map(str::to_owned).collect();
    missing.extend(kernel.missing(Some(config), bytes));
    let lost = kernel.events_lost().unwrap_or(0);
    match session_figures(port) {
        Some(f) => {
            let losses = kernel.with_perf_loss(status_line::summary(f, lost));
            let line = status_line::end_line(losses, &missing);
            eprintln!("{}", status_line::with_notes(line, &kernel.notes()));
        }
        None => {
            // Without traced's figures nothing can be called "not lost":
            // the trace's own (kernel) losses, and that the rest is unknown.
            missing.insert(
                0,
                "traced did not report the session's loss figures (GetTraceStats failed)".into(),
            );
            let losses = kernel.with_perf_loss(status_line::summary(Default::default(), lost));
            let line = status_line::end_line_without_service(losses, &missing);
            eprintln!("{}", status_line::with_notes(line, &kernel.notes()));
        }
    }
}

/// What a file traced wrote says about losses, and its size; nothing for
/// a pipe or another non-regular file (it cannot be read back).
pub(super) fn written_file_losses(file: Option<&File>) -> (KernelLoss, Option<u64>) {
    let mut kernel = KernelLoss::default();
    let regular = file.and_then(|f| Some((f, f.metadata().ok()?)));
    let Some((f, meta)) = regular.filter(|(_, m)| m.is_file()) else {
        return (kernel, None);
    };
    if let Err(e) = kernel.scan_file(f) {
        eprintln!("Could not read the trace back for its ftrace stats: {e}");
    }
    (kernel, Some(meta.len()))
}

/// traced could not write the output file to the end.
const FILE_CUT: &str =
    "the output file could not be written to the end (it ends at the last whole packet written)";

/// An attached client got no output file from the service (Perfetto's own
/// traced does not hand it over), so the trace's own figures are unknown.
pub(super) const FILE_NOT_READ_BACK: &str =
    "the trace file was not read back (the service did not hand it to the attaching client): \
     what the kernel lost and what the trace itself records are unknown";

/// How traced's error for a failed write of the output file begins.
const FILE_WRITE_FAILED: &str = "Writing the trace file failed";

fn clear_status(shown: bool) {
    if shown {
        eprint!("\r\x1b[K");
    }
}

//! `--attach`, `--is_detached` and `--clone`: sessions that already exist.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::time::Duration;

use super::options::{CloneTarget, Output, TracePlan};
use super::output;
use super::rpc::{decode, encode, Port};
use super::session::{self, ReadyNotifier};
use super::signals::StopSignals;
use crate::ipc::client::ClientReply;
use crate::pb::protos::{
    mod_CloneSessionRequest::OneOfselector, mod_ObservableEvents::CloneTriggerHit, AttachRequest,
    AttachResponse, CloneSessionRequest, CloneSessionResponse, DetachRequest, DetachResponse,
    DisableTracingRequest, FlushRequest, FlushResponse, TraceConfig,
};
use crate::protozero::{put_varint, VecStream};

const TIMEOUT: Duration = Duration::from_secs(30);

/// Attach, with the session's output file when the service hands it over
/// (our traced does, for the end line; upstream's does not).
fn attach(port: &mut Port, key: &str) -> Result<(AttachResponse, Option<File>), String> {
    port.client.set_timeout(Some(TIMEOUT));
    let req = AttachRequest {
        key: Some(key.to_owned()),
    };
    let mut replies = port
        .client
        .invoke(&port.service, "Attach", &encode(&req), None)
        .map_err(|e| format!("Attach: {e}"))?;
    match replies.pop() {
        Some(ClientReply {
            success: true,
            payload,
            fd,
            ..
        }) => Ok((decode("Attach", &payload)?, fd.map(File::from))),
        _ => Err("Attach failed".into()),
    }
}

/// `--is_detached=KEY`: 0 if a session is detached under KEY, 2 if not.
pub fn is_detached(socket: &str, key: &str) -> i32 {
    let mut port = match Port::connect(socket, "ConsumerPort") {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    if attach(&mut port, key).is_err() {
        return 2;
    }
    match port.call::<_, DetachResponse>(
        "Detach",
        &DetachRequest {
            key: Some(key.to_owned()),
        },
        None,
    ) {
        Ok(_) => 0,
        Err(_) => 1,
    }
}

/// `--attach=KEY [--stop]`: re-attach and wait for the session to finish.
pub fn attach_and_wait(socket: &str, key: &str, stop: bool, signals: &mut StopSignals) -> i32 {
    let mut port = match Port::connect(socket, "ConsumerPort") {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let (config, file) = match attach(&mut port, key) {
        Ok((r, file)) => (r.trace_config.unwrap_or_default(), file),
        Err(_) => {
            eprintln!("Session re-attach failed. Check service logs for details");
            return 2;
        }
    };
    let mut req = VecStream::new();
    put_varint(&mut req, 2, 1); // attach_notification_only
    let enable_id = match port.start_raw("EnableTracing", req.into_bytes(), None) {
        Ok(id) => id,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    if stop {
        let flush = FlushRequest {
            timeout_ms: Some(0),
            flags: Some(2 | (2 << 4)),
        };
        if port
            .call::<_, FlushResponse>("Flush", &flush, None)
            .is_err()
        {
            eprintln!("Final flush unsuccessful.");
        }
        let _ = port.start("DisableTracing", &DisableTracingRequest {}, None);
    }
    let plan = TracePlan {
        config_bytes: Vec::new(),
        config,
        output: None,
        background: super::options::Background::No,
        notify_fd: None,
        detach_key: None,
        uuid: String::new(),
        rotate: None,
        strict: false,
    };
    session::wait_and_collect(
        &mut port,
        enable_id,
        None,
        &plan,
        file,
        signals,
        &mut ReadyNotifier(None),
        None,
        None,
    )
}

/// `--clone ID` / `--clone-by-name NAME`: snapshot a running session.
pub fn clone(socket: &str, target: &CloneTarget, for_bugreport: bool, out: &Output) -> i32 {
    clone_for(socket, target, for_bugreport, None, out)
}

/// A clone, made for `trigger` when a CLONE_SNAPSHOT trigger hit (the
/// service records it in the clone).
pub fn clone_for(
    socket: &str,
    target: &CloneTarget,
    for_bugreport: bool,
    trigger: Option<&CloneTriggerHit>,
    out: &Output,
) -> i32 {
    let file = match output::open(out) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let mut port = match Port::connect(socket, "ConsumerPort") {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            output::remove_if_empty(out);
            return 1;
        }
    };
    port.client.set_timeout(Some(TIMEOUT));
    let req = CloneSessionRequest {
        selector: match target {
            CloneTarget::Id(id) => OneOfselector::session_id(*id),
            CloneTarget::Name(n) => OneOfselector::unique_session_name(n.clone()),
        },
        skip_trace_filter: Some(for_bugreport),
        for_bugreport: Some(for_bugreport),
        clone_trigger_name: trigger.and_then(|t| t.trigger_name.clone()),
        clone_trigger_producer_name: trigger.and_then(|t| t.producer_name.clone()),
        clone_trigger_trusted_producer_uid: trigger.and_then(|t| t.producer_uid.map(|u| u as i32)),
        clone_trigger_boot_time_ns: trigger.and_then(|t| t.boot_time_ns),
        clone_trigger_delay_ms: trigger.and_then(|t| t.trigger_delay_ms),
    };
    let fd = file.try_clone().ok().map(OwnedFd::from);
    let resp: CloneSessionResponse = match port.call("CloneSession", &req, fd) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            output::remove_if_empty(out);
            return 1;
        }
    };
    if resp.success != Some(true) {
        // Upstream logs and exits 0 when the service refuses a clone.
        eprintln!("Service error: {}", resp.error.unwrap_or_default());
        // The client wrote nothing; what traced may have copied into the
        // file for a write_into_file clone that then failed goes too.
        if matches!(out, Output::File { .. }) {
            let _ = file.set_len(0);
        }
        output::remove_if_empty(out);
        return 0;
    }
    // The end-of-trace line of a clone, as of a session: the clone's own
    // stats (the consumer is attached to it now) and what its trace tells.
    // Nothing waits on a trigger here.
    let config = TraceConfig::default();
    if resp.was_write_into_file == Some(true) {
        // traced wrote the file: read it back for what it says.
        let (kernel, size) = session::written_file_losses(Some(&file));
        session::print_summary(&mut port, &kernel, &config, size, None);
        eprintln!("Trace written into the output file");
        return 0;
    }
    match session::read_buffers(&mut port, file) {
        Ok((bytes, _, kernel)) => {
            session::print_summary(&mut port, &kernel, &config, Some(bytes), None);
            eprintln!("Wrote {bytes} bytes (cloned session)");
            0
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

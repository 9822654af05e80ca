//! `syscall_events` for the ftrace mux: what one session wants of
//! raw_syscalls (its own userspace filter), and the instance's kernel
//! filter, the union over its sessions (FACTS g.4). Upstream gives every
//! session the union; we also filter per session, so each gets only the
//! syscalls it asked for.

use super::instance::KInstance;
use crate::pb::protos::FtraceConfig;
use crate::traced_probes::ftrace::parse::bundle::EventFilter;
use crate::traced_probes::ftrace::parse::syscalls::{self, SyscallFilter, SyscallWant};

/// `syscall_events`: adds raw_syscalls to `wanted` and this session's
/// own userspace filter (the kernel filter is the union over the
/// instance's sessions). Returns what the session wants of raw_syscalls.
pub fn setup(
    inst: &KInstance,
    cfg: &FtraceConfig,
    wanted: &mut Vec<(String, String)>,
    filter: &mut EventFilter,
    failed_events: &mut Vec<String>,
) -> Option<SyscallWant> {
    let mut want = None;
    if !cfg.syscall_events.is_empty() {
        let (ids, unknown) = syscalls::resolve(&cfg.syscall_events);
        for n in unknown {
            crate::log_warn!("ftrace: unknown syscall {n:?} on this arch");
            failed_events.push(n);
        }
        if !ids.is_empty() {
            for n in ["sys_enter", "sys_exit"] {
                let e = ("raw_syscalls".to_string(), n.to_string());
                if !wanted.contains(&e) {
                    wanted.push(e);
                }
            }
        }
        filter.syscalls = Some(SyscallFilter::new(&inst.table, &ids));
        want = Some(SyscallWant::Only(ids));
    }
    if !wanted.iter().any(|(g, _)| g == "raw_syscalls") {
        filter.syscalls = None;
        return None;
    }
    Some(want.unwrap_or(SyscallWant::All))
}

/// Sets the instance's raw_syscalls filter to the union of `wants` (FACTS
/// g.4), writing only on change; with no wants left, lifts a filter we set.
pub fn set_kernel_filter<'a>(
    inst: &mut KInstance,
    wants: impl IntoIterator<Item = &'a SyscallWant>,
) {
    let expr = match syscalls::kernel_filter(wants) {
        Some(e) => e,
        None if inst.syscall_filter.as_deref().is_some_and(|f| f != "0") => "0".to_string(),
        None => return,
    };
    if inst.syscall_filter.as_deref() == Some(expr.as_str()) {
        return;
    }
    for n in ["sys_enter", "sys_exit"] {
        if let Err(e) = inst
            .tracefs
            .set_event_filter("raw_syscalls", Some(n), &expr)
        {
            crate::log_warn!("ftrace: cannot filter raw_syscalls/{n}: {e}");
        }
    }
    inst.syscall_filter = Some(expr);
}

//! The events a tracefs instance has on: the union over the data sources
//! set up on it. Each event is reference counted, so stopping one session
//! disables only what no other session uses (FACTS g.4); each session
//! still sees only its own events through its [`EventFilter`].

use std::collections::HashMap;

use super::instance::KInstance;
use crate::pb::protos::FtraceConfig;
use crate::traced_probes::ftrace::parse::atrace;
use crate::traced_probes::ftrace::parse::bundle::EventFilter;
use crate::traced_probes::ftrace::parse::kprobes::is_reserved_group;

type Event = (String, String);

#[derive(Debug, Default)]
pub struct EventUnion {
    refs: HashMap<Event, usize>,
}

/// What enabling one session's events gave.
#[derive(Debug, Default)]
pub struct Enabled {
    /// On for this session (it holds a reference on each).
    pub events: Vec<Event>,
    /// Not in this kernel (or not translatable).
    pub unknown: Vec<String>,
    /// In the kernel, but enabling failed.
    pub failed: Vec<String>,
}

/// The (group, name) list a config asks for, and the atrace categories we
/// do not know.
pub fn wanted(inst: &KInstance, cfg: &FtraceConfig, android: bool) -> (Vec<Event>, Vec<String>) {
    let mut out: Vec<Event> = Vec::new();
    let mut push = |g: &str, n: &str| {
        // Kprobe groups come from `kprobe_events` only (as upstream).
        if is_reserved_group(g) {
            return;
        }
        let e = (g.to_string(), n.to_string());
        if !out.contains(&e) {
            out.push(e);
        }
    };
    // Patterns that match nothing here (a group wildcard of a group this
    // kernel lacks, a bare name no group has) are unknown like a
    // misspelled event.
    let mut unknown = Vec::new();
    for ev in &cfg.ftrace_events {
        match ev.split_once('/') {
            Some((g, "*")) => {
                let names = inst.tracefs.events_in_group(g).unwrap_or_default();
                if names.is_empty() {
                    unknown.push(ev.clone());
                }
                for n in names {
                    push(g, &n);
                }
            }
            Some((g, n)) => push(g, n),
            None => {
                // A bare name: whichever group of the table has it.
                let groups: Vec<String> = inst
                    .table
                    .events()
                    .filter(|t| t.name == *ev)
                    .map(|t| t.group.clone())
                    .collect();
                if groups.is_empty() {
                    unknown.push(ev.clone());
                }
                for g in groups {
                    push(&g, ev);
                }
            }
        }
    }
    if !cfg.atrace_categories.is_empty() || !cfg.atrace_apps.is_empty() {
        // Categories are kernel event sets, and userspace markers
        // (trace_marker) arrive as ftrace/print. Only Android also has an
        // atrace binary to tell.
        static ATRACE_NOTE: std::sync::Once = std::sync::Once::new();
        ATRACE_NOTE.call_once(|| {
            if android {
                return;
            }
            crate::log_info!(
                "atrace is Android-only; recording the categories' kernel events and ftrace/print"
            );
        });
        let available = inst.tracefs.all_events().unwrap_or_default();
        let userspace_only = cfg.atrace_userspace_only.unwrap_or(false);
        let (events, unknown_categories) =
            atrace::expand(&cfg.atrace_categories, userspace_only, &available);
        for (g, n) in events {
            push(&g, &n);
        }
        unknown.extend(unknown_categories);
    }
    (out, unknown)
}

/// Turns on the `wanted` events of one session on `inst` (those nobody
/// has on yet) and lets them through `filter`.
pub fn enable(
    inst: &mut KInstance,
    cfg: &FtraceConfig,
    wanted: Vec<Event>,
    filter: &mut EventFilter,
) -> Enabled {
    let mut out = Enabled::default();
    let KInstance {
        tracefs,
        table,
        events: union,
        ..
    } = inst;
    for (g, n) in wanted {
        let id = match table.event_by_name(&g, &n) {
            Some(t) => Some(t.ftrace_id),
            None if cfg.disable_generic_events.unwrap_or(false) => None,
            None => match tracefs.read_format(&g, &n) {
                Ok(text) => table.add_generic(&g, &n, &text).ok(),
                Err(_) => None,
            },
        };
        let Some(ftrace_id) = id else {
            out.unknown.push(format!("{g}/{n}"));
            continue;
        };
        let refs = union.refs.entry((g.clone(), n.clone())).or_insert(0);
        // ftrace/* events (print...) are always on; they have no switch.
        if *refs == 0 && g != "ftrace" {
            if let Err(e) = tracefs.enable_event(&g, &n) {
                crate::log_warn!("ftrace: cannot enable {g}/{n}: {e}");
                out.failed.push(format!("{g}/{n}"));
                union.refs.remove(&(g, n));
                continue;
            }
        }
        *refs += 1;
        filter.enable(ftrace_id);
        out.events.push((g, n));
    }
    out
}

/// Drops one session's references; events nobody uses any more go off.
pub fn disable(inst: &mut KInstance, events: &[Event]) {
    for e in events {
        let Some(n) = inst.events.refs.get_mut(e) else {
            continue;
        };
        *n -= 1;
        if *n == 0 {
            inst.events.refs.remove(e);
            if e.0 != "ftrace" {
                let _ = inst.tracefs.disable_event(&e.0, &e.1);
            }
        }
    }
}

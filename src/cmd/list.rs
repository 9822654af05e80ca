//! `--list-categories` and `--list-events`: what can be recorded here,
//! read from the live tracefs (like `trace-cmd list -e`).

use crate::traced_probes::ftrace::parse::atrace;
use crate::traced_probes::ftrace::Tracefs;

/// Light-mode words that are not atrace categories.
const EXTRA: &[(&str, &str)] = &[("hyp", "every event of the hypervisor tracefs instance")];

fn events_here() -> Result<Vec<(String, String)>, String> {
    let fs = Tracefs::discover().map_err(|e| {
        format!("cannot read tracefs ({e}); mount it or run as root to list events")
    })?;
    let mut events = fs
        .all_events()
        .map_err(|e| format!("{}/events: {e}", fs.root().display()))?;
    events.sort_unstable();
    Ok(events)
}

/// Every kernel event as `group/event`, the form light mode and
/// `ftrace_events` take.
pub fn list_events() -> i32 {
    match events_here() {
        Ok(events) => {
            for (g, e) in events {
                println!("{g}/{e}");
            }
            0
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// Every category light mode knows, with the kernel events it turns on
/// here (besides ftrace/print, which every category records).
pub fn list_categories() -> i32 {
    let events = events_here();
    if let Err(e) = &events {
        eprintln!("{e}; event counts unknown");
    }
    for cat in atrace::categories() {
        match events.as_ref().ok() {
            Some(avail) => {
                let found = atrace::category_events(cat, avail).unwrap_or_default();
                let names: Vec<String> = found.iter().map(|(g, e)| format!("{g}/{e}")).collect();
                if names.is_empty() {
                    println!("{cat:<14} (no events on this kernel; userspace markers only)");
                } else {
                    println!("{cat:<14} {}", names.join(" "));
                }
            }
            None => println!("{cat}"),
        }
    }
    for (word, what) in EXTRA {
        println!("{word:<14} {what}");
    }
    0
}

/// Light mode's tokens against this kernel's events and the categories
/// (events unchecked when tracefs cannot be read here).
pub fn check_light_tokens(tokens: &[String]) -> Result<(), String> {
    let events = events_here().ok();
    let cats: Vec<&str> = atrace::categories().collect();
    crate::cmd::light_check::check(tokens, events.as_deref(), &cats)
}

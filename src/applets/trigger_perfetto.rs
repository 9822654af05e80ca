//! `trigger_perfetto`: activate named triggers in running sessions.
//! Unknown flags are ignored on purpose, as upstream does, so apps built
//! against other versions keep working.

use super::Via;
use crate::cmd::triggers;
use crate::ipc::default_sockets::producer_socket_name;

pub fn main(args: &[String], _via: Via) -> i32 {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        eprintln!("Usage: trigger_perfetto TRIGGER_NAME...\n\nActivates the named triggers in running tracing sessions.");
        return 1;
    }
    let (flags, names): (Vec<&String>, Vec<&String>) =
        args.iter().partition(|a| a.starts_with('-'));
    if !flags.is_empty() {
        eprintln!(
            "trigger_perfetto: ignoring unknown arguments: {}",
            flags
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    if names.is_empty() {
        eprintln!("trigger_perfetto: at least one trigger name is required");
        return 1;
    }
    let names: Vec<String> = names.into_iter().cloned().collect();
    triggers::activate(&producer_socket_name(), &names)
}

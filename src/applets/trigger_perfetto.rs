//! `trigger_perfetto`: activate named triggers in running sessions.

use super::Via;

pub fn main(args: &[String], _via: Via) -> i32 {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        eprintln!("Usage: trigger_perfetto TRIGGER_NAME...");
        return 1;
    }
    eprintln!("trigger_perfetto: not in this build yet");
    1
}

//! `perfetto`: the consumer command-line client.

use super::Via;

pub fn main(args: &[String], _via: Via) -> i32 {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        eprintln!("Usage: perfetto [-c CONFIG [--txt]] [-t TIME] [-b SIZE] [-o OUT] [EVENTS...]");
        return 1;
    }
    eprintln!("perfetto: not in this build yet");
    1
}

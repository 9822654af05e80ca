//! The multicall entry point: `traced`, `traced_probes`, `perfetto` and
//! `trigger_perfetto` are all this one binary (see `tracebox::applets`).

fn main() {
    exit_quietly_on_closed_stdout();
    let args: Vec<String> = std::env::args().collect();
    std::process::exit(tracebox::applets::dispatch(&args));
}

/// `tracebox --list | grep -q traced` closes our stdout early; like
/// coreutils, that is success, not a crash. (SIGPIPE stays ignored: the
/// daemons need EPIPE from sockets, and print! panics on it instead.)
fn exit_quietly_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info)
    }));
}

//! The multicall entry point: `traced`, `traced_probes`, `perfetto` and
//! `trigger_perfetto` are all this one binary (see `tracebox::applets`).

fn main() {
    let args: Vec<String> = std::env::args().collect();
    std::process::exit(tracebox::applets::dispatch(&args));
}

//! traced_probes' untrusted inputs: GetAsyncCommand payloads from the
//! service (first byte even) and the crash state file (odd). Never panic.
use tracebox::traced_probes::{ftrace::crash_state, wire};

/// One fuzz input (cargo-fuzz and the stable replay runner call this).
pub fn run(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    if sel % 2 == 0 {
        if let Ok(wire::Command::SetupDataSource { config, .. }) = wire::parse_command(rest) {
            let _ = wire::target_buffer(&config);
        }
    } else {
        let entries = crash_state::parse(&String::from_utf8_lossy(rest));
        assert_eq!(crash_state::parse(&crash_state::format(&entries)), entries);
    }
}

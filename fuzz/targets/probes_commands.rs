//! traced_probes' untrusted inputs: GetAsyncCommand payloads from the
//! service (first byte even; with an ftrace config, its kprobes and
//! function_graph patterns are checked as setup checks them) and the crash
//! state file (odd). Never panic; nothing refused reaches a tracefs line.
use tracebox::traced_probes::ftrace::parse::{funcgraph, kprobes};
use tracebox::traced_probes::{ftrace::crash_state, wire};

/// One fuzz input (cargo-fuzz and the stable replay runner call this).
pub fn run(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    if sel % 2 == 0 {
        if let Ok(wire::Command::SetupDataSource { config, .. }) = wire::parse_command(rest) {
            let _ = wire::target_buffer(&config);
            if let Some(cfg) = &config.ftrace_config {
                let (probes, _) = kprobes::wanted(cfg, "1");
                for p in &probes {
                    assert!(kprobes::valid_function_untrusted(&p.function));
                    let line = kprobes::create_line(&p.group("1"), &p.function, p.retprobe, None);
                    assert!(
                        !line.contains('\n') && line.split(' ').count() == 2,
                        "{line:?}"
                    );
                }
                if let Ok(Some(req)) = funcgraph::request_untrusted(cfg) {
                    for p in req.filters.iter().chain(&req.roots) {
                        assert!(funcgraph::valid_pattern_untrusted(p), "{p:?}");
                    }
                }
            }
        }
    } else {
        let entries = crash_state::parse(&String::from_utf8_lossy(rest));
        assert_eq!(crash_state::parse(&crash_state::format(&entries)), entries);
    }
}

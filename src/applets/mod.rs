//! Applet table and multicall dispatch.
//!
//! The applet is chosen by the basename of argv[0] (a symlink named
//! `traced`, `perfetto`, ...) or, when invoked as `tracebox`, by argv[1].
//! `tracebox -...` (perfetto flags without the applet name) runs the
//! perfetto client in autostart mode, as `tracebox perfetto ...` does.

mod args;
mod background;
mod perfetto;
mod report;
mod traced;
mod traced_perf;
mod traced_probes;
mod traced_relay;
mod trigger_perfetto;
mod websocket_bridge;

pub use args::parse_args;

/// How an applet was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// argv[0] was the applet's own name (a symlink or installed copy).
    Symlink,
    /// `tracebox APPLET ...` or `tracebox -flags ...`.
    Multicall,
}

/// An applet's entry point: arguments after the applet name.
pub type AppletMain = fn(args: &[String], via: Via) -> i32;

/// Every applet, with a one-line summary for `--list` and usage.
pub const APPLETS: &[(&str, &str, AppletMain)] = &[
    ("traced", "the tracing service", traced::main),
    (
        "traced_probes",
        "kernel ftrace and /proc, /sys pollers",
        traced_probes::main,
    ),
    (
        "traced_perf",
        "CPU profiling with call stacks (linux.perf)",
        traced_perf::main,
    ),
    (
        "perfetto",
        "record a trace (the consumer client)",
        perfetto::main,
    ),
    (
        "report",
        "summarize a trace file, or dump its events",
        report::main,
    ),
    (
        "trigger_perfetto",
        "activate named triggers",
        trigger_perfetto::main,
    ),
    (
        "websocket_bridge",
        "lets the Perfetto UI record over ws://127.0.0.1:8037",
        websocket_bridge::main,
    ),
    (
        "traced_relay",
        "forwards a remote machine's producers to a central traced",
        traced_relay::main,
    ),
];

use crate::VERSION;

fn find_applet(name: &str) -> Option<AppletMain> {
    APPLETS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, _, f)| *f)
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn usage() -> String {
    let mut s = format!(
        "{VERSION}: Perfetto-compatible system tracing in one binary.\n\n\
         Usage:\n  tracebox APPLET [ARGS...]   run an applet\n  \
         tracebox [PERFETTO ARGS...]  record, starting traced, traced_probes and traced_perf if none runs\n  \
         tracebox --list | --version | --help\n  \
         tracebox --list-categories   what light mode records (sched, freq, ...), with this kernel's events\n  \
         tracebox --list-events       every ftrace event of this kernel (group/event)\n\nApplets:\n"
    );
    for (name, summary, _) in APPLETS {
        s.push_str(&format!("  {name:<18} {summary}\n"));
    }
    s.push_str(
        "\nExample: tracebox -t 10s sched freq -o trace.pftrace\n\
         More: tracebox perfetto --help; example configs in configs/ of the source\n",
    );
    s
}

/// Runs the applet selected by `argv`; returns the process exit status.
pub fn dispatch(argv: &[String]) -> i32 {
    let argv0 = argv.first().map(String::as_str).unwrap_or("tracebox");
    if let Some(applet) = find_applet(basename(argv0)) {
        return applet(&argv[1..], Via::Symlink);
    }
    let Some(first) = argv.get(1) else {
        eprint!("{}", usage());
        return 1;
    };
    match first.as_str() {
        "--list" => {
            for (name, _, _) in APPLETS {
                println!("{name}");
            }
            0
        }
        "--version" => {
            println!("{VERSION}");
            0
        }
        "-h" | "--help" | "help" => {
            print!("{}", usage());
            0
        }
        name => match find_applet(name) {
            Some(applet) => applet(&argv[2..], Via::Multicall),
            None if name.starts_with('-') => perfetto::main(&argv[1..], Via::Multicall),
            None => {
                eprintln!(
                    "tracebox: unknown applet '{name}'. Applets: {}. See tracebox --help.",
                    APPLETS.iter().map(|a| a.0).collect::<Vec<_>>().join(", ")
                );
                1
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn unknown_applet_fails() {
        assert_eq!(dispatch(&v(&["tracebox", "nope"])), 1);
        assert_eq!(dispatch(&v(&["/usr/bin/tracebox"])), 1);
    }

    #[test]
    fn builtins_succeed() {
        assert_eq!(dispatch(&v(&["tracebox", "--list"])), 0);
        assert_eq!(dispatch(&v(&["tracebox", "--version"])), 0);
    }

    #[test]
    fn basename_strips_dirs() {
        assert_eq!(basename("/system/bin/traced"), "traced");
        assert_eq!(basename("perfetto"), "perfetto");
    }
}

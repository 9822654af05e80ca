//! The raw `perfetto` command line, parsed with argh.
//!
//! argh knows neither `--opt=value` nor `-t10s`, which getopt users type, so
//! [`normalize`] rewrites those forms into separate words first. What the
//! values mean is decided later, in `options.rs`.

use argh::FromArgs;

/// Record a system trace. Light mode: perfetto [-t TIME] [-b SIZE] [-s SIZE]
/// [-a APP] [-o OUT] [EVENTS/CATEGORIES...]. Config mode: perfetto -c FILE
/// [--txt] -o OUT.
#[derive(FromArgs, Debug, Default, PartialEq)]
#[argh(
    note = "End-of-trace line keys: [unrecorded-switches] sched_switch events the kernel \
never recorded (some kernels skip the switch out of a cpu's idle task): a task it switched to \
shows as the task before it until its next switch; traced_probes writes such switches in full, \
so trace_processor counts them as mismatched_sched_switch_tids. Nothing else is lost."
)]
pub struct RawFlags {
    /// trace config file (binary TraceConfig, or text with --txt); - reads stdin; :test is a
    /// built-in 2 s scheduling trace
    #[argh(option, short = 'c')]
    pub config: Option<String>,
    /// the config is protobuf text format
    #[argh(switch)]
    pub txt: bool,
    /// like --txt, but fields and enum values this build does not know are dropped
    #[argh(switch)]
    pub txt_lossy: bool,
    /// output file; - writes to stdout
    #[argh(option, short = 'o')]
    pub out: Option<String>,
    /// fail if the output file exists
    #[argh(switch)]
    pub no_clobber: bool,
    /// run in the background; prints the pid
    #[argh(switch, short = 'd')]
    pub background: bool,
    /// like --background, but wait until all data sources have started
    #[argh(switch, short = 'D')]
    pub background_wait: bool,
    /// write one status byte to this fd once all data sources have started
    #[argh(option)]
    pub notify_fd: Option<i32>,
    /// light mode: trace duration, e.g. 10s (units ms, s, m, h)
    #[argh(option, short = 't')]
    pub time: Option<String>,
    /// light mode: ring buffer size, e.g. 32mb (units k, kb, m, mb, g, gb)
    #[argh(option, short = 'b')]
    pub buffer: Option<String>,
    /// light mode: stop after writing this much, streaming to the file
    #[argh(option, short = 's')]
    pub size: Option<String>,
    /// light mode: record ftrace into this tracefs instance instead of the top level (it cannot
    /// see atrace app markers, which go to the top-level trace_marker only)
    #[argh(option)]
    pub ftrace_instance: Option<String>,
    /// light mode: an app whose atrace events to record (repeatable)
    #[argh(option, short = 'a')]
    pub app: Vec<String>,
    /// stop and exit 1 as soon as a data source cannot record what was asked (an unknown
    /// ftrace event or category, a data source nobody offers, an ftrace instance another
    /// process owns) instead of recording the rest
    #[argh(switch)]
    pub strict: bool,
    /// show producers, data sources and sessions of the running service
    #[argh(switch)]
    pub query: bool,
    /// with --query: do not truncate long lists
    #[argh(switch)]
    pub long: bool,
    /// write the service state as a binary TracingServiceState proto
    #[argh(switch)]
    pub query_raw: bool,
    /// detach the session under KEY and exit (needs write_into_file)
    #[argh(option)]
    pub detach: Option<String>,
    /// re-attach to the session detached under KEY and finish it
    #[argh(option)]
    pub attach: Option<String>,
    /// with --attach: stop the session right away
    #[argh(switch)]
    pub stop: bool,
    /// exit 0 if a session is detached under KEY, 2 if not
    #[argh(option)]
    pub is_detached: Option<String>,
    /// write a snapshot of the session with this id to --out
    #[argh(option)]
    pub clone: Option<u64>,
    /// write a snapshot of the session with this unique_session_name
    #[argh(option)]
    pub clone_by_name: Option<String>,
    /// with --clone: skip the trace filter (bugreport clone)
    #[argh(switch)]
    pub clone_for_bugreport: bool,
    /// add key[=value] to the trace's attributes (repeatable)
    #[argh(option)]
    pub add_attribute: Vec<String>,
    /// accepted like upstream; its guardrails limit uploads, which tracebox does not do
    #[argh(switch)]
    pub no_guardrails: bool,
    /// accepted for compatibility; does nothing
    #[argh(switch)]
    pub reset_guardrails: bool,
    /// autostart: use the system sockets (the default here)
    #[argh(switch)]
    pub system_sockets: bool,
    /// autostart: start private daemons on private sockets, like upstream tracebox
    #[argh(switch)]
    pub private_sockets: bool,
    /// list the categories light mode takes, with their events on this kernel
    #[argh(switch)]
    pub list_categories: bool,
    /// list this kernel's ftrace events (group/event)
    #[argh(switch)]
    pub list_events: bool,
    /// write_into_file: cut the trace into OUT.000, OUT.001, ... at this size (e.g. 256mb)
    #[argh(option)]
    pub rotate_size: Option<String>,
    /// write_into_file: cut the trace into a new file this often (e.g. 10m)
    #[argh(option)]
    pub rotate_time: Option<String>,
    /// with --rotate-*: keep only the newest N files
    #[argh(option)]
    pub rotate_keep: Option<u32>,
    /// print the version and exit
    #[argh(switch)]
    pub version: bool,
    /// ftrace events (group/name, group/*) and atrace categories (sched, freq, ...)
    #[argh(positional)]
    pub categories: Vec<String>,
}

/// Short options that take a value, for splitting `-t10s`.
const SHORT_WITH_VALUE: &[char] = &['c', 'o', 't', 'b', 's', 'a'];

/// Rewrites getopt spellings argh lacks: `--opt=value` → `--opt value`,
/// `-t10s` → `-t 10s`, and upstream's `--is_detached` → `--is-detached`.
pub fn normalize(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len() + 2);
    let mut rest_positional = false;
    for arg in args {
        if rest_positional {
            out.push(arg.clone());
        } else if arg == "--" {
            rest_positional = true;
            out.push(arg.clone());
        } else if let Some(body) = arg.strip_prefix("--") {
            let (name, value) = match body.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (body, None),
            };
            // argh long names cannot hold '_'; upstream spells this one so.
            let name = if name == "is_detached" {
                "is-detached"
            } else {
                name
            };
            out.push(format!("--{name}"));
            out.extend(value.map(str::to_owned));
        } else if arg.len() > 2 && arg.starts_with('-') && arg[1..].starts_with(SHORT_WITH_VALUE) {
            out.push(arg[..2].to_owned());
            out.push(arg[2..].to_owned());
        } else {
            out.push(arg.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<RawFlags, String> {
        let owned: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let norm = normalize(&owned);
        let refs: Vec<&str> = norm.iter().map(String::as_str).collect();
        RawFlags::from_args(&["perfetto"], &refs).map_err(|e| e.output)
    }

    #[test]
    fn light_mode_flags() {
        let f = parse(&[
            "-t",
            "10s",
            "-b",
            "64mb",
            "sched",
            "freq",
            "-o",
            "x.pftrace",
        ])
        .unwrap();
        assert_eq!(f.time.as_deref(), Some("10s"));
        assert_eq!(f.buffer.as_deref(), Some("64mb"));
        assert_eq!(f.out.as_deref(), Some("x.pftrace"));
        assert_eq!(f.categories, ["sched", "freq"]);
    }

    #[test]
    fn getopt_spellings() {
        let f = parse(&["--time=2s", "-o-", "--detach=k1", "-c/tmp/c.pbtx", "--txt"]).unwrap();
        assert_eq!(f.time.as_deref(), Some("2s"));
        assert_eq!(f.out.as_deref(), Some("-"));
        assert_eq!(f.detach.as_deref(), Some("k1"));
        assert_eq!(f.config.as_deref(), Some("/tmp/c.pbtx"));
        assert!(f.txt);
        let f = parse(&["--is_detached=abc"]).unwrap();
        assert_eq!(f.is_detached.as_deref(), Some("abc"));
    }

    #[test]
    fn repeated_and_unknown() {
        let f = parse(&["-a", "com.x", "--app", "com.y", "--add-attribute", "k=v"]).unwrap();
        assert_eq!(f.app, ["com.x", "com.y"]);
        assert_eq!(f.add_attribute, ["k=v"]);
        assert!(parse(&["--bogus"]).is_err());
        assert!(parse(&["-t"]).is_err());
    }
}

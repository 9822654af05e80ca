//! `report`: reads a trace file and prints a summary, or the events in
//! time order (`--events`). The trace logic lives in `crate::report`.

use std::io::Write;

use argh::FromArgs;

use super::{parse_args, Via};
use crate::protozero::decimal::parse_decimal;
use crate::report::{events, output, profile, summarize, walk};

/// Summarize a Perfetto trace: machine, losses, CPU use, who ran,
/// scheduling latency, event counts, atrace slices.
#[derive(FromArgs)]
struct Args {
    /// print every event in time order (like trace-cmd report)
    #[argh(switch)]
    events: bool,
    /// machine-readable summary (with a "profile" member when the trace
    /// has PerfSample packets; with --profile, the profile alone)
    #[argh(switch)]
    json: bool,
    /// with --events: only these events (comma-separated names, repeatable)
    #[argh(option, short = 'e')]
    event: Vec<String>,
    /// with --events: only events of these pids (task or target); in the
    /// profile: only samples of these processes
    #[argh(option, short = 'P')]
    pid: Vec<String>,
    /// only the profile of the trace's PerfSample packets (top functions
    /// by self and total samples, heaviest call paths)
    #[argh(switch)]
    profile: bool,
    /// in the profile: only processes of these names (argv[0] without
    /// its directory, from the trace's process tree)
    #[argh(option)]
    comm: Vec<String>,
    /// with --events: only these cpus
    #[argh(option)]
    cpu: Vec<String>,
    /// start of the time window, trace seconds (as the events dump shows)
    #[argh(option)]
    from: Option<String>,
    /// end of the time window, trace seconds
    #[argh(option)]
    to: Option<String>,
    /// rows per table (default 20)
    #[argh(option, default = "20")]
    top: usize,
    /// the trace file
    #[argh(positional)]
    file: String,
}

fn list<T: std::str::FromStr>(v: &[String]) -> Result<Vec<T>, String> {
    v.iter()
        .flat_map(|s| s.split(','))
        .map(|s| s.trim().parse().map_err(|_| format!("bad value '{s}'")))
        .collect()
}

/// Seconds (decimal text) to ns; std's float parser is not linked in.
fn ns(s: &Option<String>, default: u64) -> Result<u64, String> {
    match s {
        None => Ok(default),
        Some(t) => parse_decimal(t)
            .filter(|v| *v >= 0.0)
            .map(|v| (v * 1e9).round() as u64)
            .ok_or(format!("bad time '{t}' (seconds)")),
    }
}

pub fn main(args: &[String], _via: Via) -> i32 {
    let a: Args = match parse_args("report", args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let file = match std::fs::File::open(&a.file) {
        Ok(f) => std::io::BufReader::with_capacity(0, f),
        Err(e) => {
            eprintln!("report: {}: {e}", a.file);
            return 1;
        }
    };
    let (since, until) = match (ns(&a.from, 0), ns(&a.to, u64::MAX)) {
        (Ok(s), Ok(u)) => (s, u),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("report: {e}");
            return 1;
        }
    };
    let mut out = std::io::stdout().lock();
    let error = if a.events {
        let (pids, cpus) = match (list(&a.pid), list(&a.cpu)) {
            (Ok(p), Ok(c)) => (p, c),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("report: {e}");
                return 1;
            }
        };
        let filter = events::Filter {
            names: list(&a.event).unwrap_or_default(),
            pids,
            cpus,
            since,
            until,
        };
        let mut p = events::Printer::default();
        let mut io_ok = true;
        let w = walk(file, true, &mut |r, w| {
            if let Some(line) = p.line(r, w, &filter) {
                io_ok &= writeln!(out, "{line}").is_ok();
            }
        });
        if !io_ok {
            return 1;
        }
        w.error
    } else if a.profile {
        let filter = match list(&a.pid) {
            Ok(pids) => profile::Filter {
                pids,
                comms: list(&a.comm).unwrap_or_default(),
            },
            Err(e) => {
                eprintln!("report: {e}");
                return 1;
            }
        };
        let (p, error) = profile::Profile::scan(file);
        let s = if a.json {
            format!("{}\n", profile::json(&p, &filter, a.top))
        } else {
            profile::text(&p, &filter, a.top)
        };
        if out.write_all(s.as_bytes()).is_err() {
            return 1;
        }
        error
    } else {
        let (w, an) = summarize(file, since, until);
        // A second pass for the profile: shown when there are samples.
        let prof = std::fs::File::open(&a.file)
            .ok()
            .map(|f| profile::Profile::scan(std::io::BufReader::with_capacity(0, f)).0)
            .filter(|p| p.samples > 0);
        let filter = profile::Filter {
            pids: list(&a.pid).unwrap_or_default(),
            comms: list(&a.comm).unwrap_or_default(),
        };
        let s = match (a.json, &prof) {
            (true, Some(p)) => output::with_field(
                output::json(&w, &an),
                "profile",
                &profile::json(p, &filter, a.top),
            ),
            (true, None) => output::json(&w, &an),
            (false, Some(p)) => format!(
                "{}\n{}",
                output::text(&w, &an, a.top),
                profile::text(p, &filter, a.top)
            ),
            (false, None) => output::text(&w, &an, a.top),
        };
        if out.write_all(s.as_bytes()).is_err() {
            return 1;
        }
        w.error
    };
    match error {
        Some(e) => {
            eprintln!("report: {}: stopped early: {e}", a.file);
            2
        }
        None => 0,
    }
}

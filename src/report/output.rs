//! The summary as text (for people) and JSON (for scripts).

use std::fmt::Write;

use super::analysis::{slot_id, Agg, Analysis, Cpu};
use super::ftrace::event_name;
use super::Walk;

/// Quotes `s` as a JSON string.
pub fn js(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// A process: pid, name, cpu time, threads.
#[derive(Default)]
struct Proc {
    pid: i32,
    name: String,
    cpu_ns: u64,
    threads: u64,
}

/// Everything the report shows, worked out once for both formats.
struct View {
    duration: u64,
    clock: String,
    threads: Vec<(i32, i32, String)>,
    procs: Vec<Proc>,
    losses: Vec<(String, String)>,
    sources: Vec<String>,
    events: Vec<String>,
}

/// The trace clock, and the ftrace clock when it is another one.
fn clock_name(w: &Walk) -> String {
    let builtin = [
        "?",
        "realtime",
        "realtime_coarse",
        "mono",
        "mono_coarse",
        "mono_raw",
        "boot",
    ];
    let c = w.meta.clocks.trace_clock;
    let name = |c: u64| {
        builtin
            .get(c as usize)
            .map_or(format!("clock {c}"), |s| s.to_string())
    };
    let trace = name(if c == 0 { 6 } else { c });
    let ftrace = ["boot", "unknown", "global", "local", "mono_raw"];
    match w
        .bundles
        .clock
        .map(|c| ftrace.get(c as usize).unwrap_or(&"?"))
    {
        Some(f) if *f != trace => format!("{trace} (ftrace clock {f})"),
        _ => trace,
    }
}

fn view(w: &Walk, a: &Analysis) -> View {
    let m = &w.meta;
    let (start, end) = match a.start {
        Some(s) => (s, a.end),
        None => (m.first_ts.unwrap_or(0), m.last_ts),
    };
    let threads: Vec<(i32, i32, String)> = a
        .threads
        .iter()
        .filter(|(_, t)| t.cpu_ns + t.switches + t.wakeups > 0)
        .map(|(&tid, _)| (tid, m.tgid(tid), w.name(tid)))
        .collect();
    let threads = ranked(threads, |t| (a.threads[&t.0].cpu_ns, t.0 as i64));
    let by_pid: Vec<(i32, u64)> = threads
        .iter()
        .map(|t| (t.1, a.threads[&t.0].cpu_ns))
        .collect();
    let by_pid = ranked(by_pid, |p| (0, p.0 as i64));
    let mut procs: Vec<Proc> = Vec::new();
    for (pid, ns) in by_pid {
        match procs.last_mut() {
            Some(p) if p.pid == pid => {
                p.cpu_ns += ns;
                p.threads += 1;
            }
            _ => procs.push(Proc {
                pid,
                name: m.process_name(pid),
                cpu_ns: ns,
                threads: 1,
            }),
        }
    }
    let procs = ranked(procs, |p| (p.cpu_ns, p.pid as i64));

    let mut losses = Vec::new();
    let mut loss = |k: &str, v: String| losses.push((k.to_owned(), v));
    if let Some(l) = m.stats_line() {
        loss("trace_stats", l);
    }
    for (cpu, overrun, dropped) in &m.ftrace_cpu_end {
        if overrun + dropped > 0 {
            loss(
                "ftrace_cpu",
                format!("cpu{cpu}: {overrun} overrun, {dropped} dropped (kernel counters)"),
            );
        }
    }
    let b = &w.bundles;
    let counts = [
        ("bundles_with_lost_events", b.lost_events_bundles),
        ("ftrace_errors", b.errors),
        ("malformed_events", b.malformed),
        ("generic_event_names_over_limit", b.generic_overflow),
        ("events_out_of_order", w.late),
        ("malformed_packets", m.malformed_packets),
        ("malformed_trace_config", m.bad_config),
        ("non_packet_fields", w.stray_fields),
        ("atrace_over_limit", a.atrace_dropped),
        ("atrace_unmatched_ends", a.atrace_unmatched),
        ("events_of_threads_over_limit", a.threads_over_limit),
        ("names_over_limit", m.over_limit + m.seqs.over_limit),
        ("clock_snapshots_over_limit", m.clocks.over_limit),
        ("timestamps_without_clock_path", m.clocks.failed),
    ];
    for (k, v) in counts {
        if v > 0 {
            loss(k, v.to_string());
        }
    }
    let unknown = ranked(m.unknown.clone(), |u| (0, u.0 as i64));
    for (f, n) in unknown {
        loss("unknown_packets", format!("field {f}: {n} packets skipped"));
    }
    for s in &m.setup {
        loss("setup", s.clone());
    }
    if let Some(e) = &w.error {
        loss("file", format!("{e}; read {} bytes", w.bytes));
    }

    let (mut sources, mut events) = (Vec::new(), Vec::new());
    if let Some(c) = &m.config {
        for ds in &c.data_sources {
            let Some(cfg) = &ds.config else { continue };
            sources.push(cfg.name.clone().unwrap_or_default());
            if let Some(f) = &cfg.ftrace_config {
                events.extend(f.ftrace_events.iter().cloned());
                events.extend(f.atrace_categories.iter().map(|c| format!("atrace:{c}")));
                events.extend(f.atrace_apps.iter().map(|c| format!("atrace_app:{c}")));
            }
        }
    }
    View {
        duration: session_duration(m).unwrap_or(end.saturating_sub(start)),
        clock: clock_name(w),
        threads,
        procs,
        losses,
        sources,
        events,
    }
}

/// `s` within `max` chars, ending in `...` when cut.
fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    s.chars().take(max - 3).collect::<String>() + "..."
}

/// How long the session ran: first to last clock snapshot, else the
/// config's duration; `None` when neither says (then the events' span).
fn session_duration(m: &super::meta::Meta) -> Option<u64> {
    match m.snapshot_span {
        Some((first, last)) if last > first => Some(last - first),
        _ => m
            .config
            .as_ref()
            .and_then(|c| c.duration_ms)
            .filter(|&d| d > 0)
            .map(|d| d as u64 * 1_000_000),
    }
}

/// The cpus the trace has events of.
fn cpus(a: &Analysis) -> impl Iterator<Item = (usize, &Cpu)> {
    a.cpus.iter().enumerate().filter(|c| c.1.seen)
}

/// Event ids with counts.
fn counts(a: &Analysis) -> impl Iterator<Item = (u32, &Vec<u64>)> {
    let rows = a.counts.iter().enumerate();
    rows.filter(|r| !r.1.is_empty())
        .map(|(i, v)| (slot_id(i), v))
}

fn ms(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// `rows` by descending `key().0`, then ascending `key().1`. Every table
/// goes through this one sort (each sort instance costs binary size).
fn ranked<T: Default>(mut rows: Vec<T>, key: impl Fn(&T) -> (u64, i64)) -> Vec<T> {
    let mut order: Vec<(u64, i64, usize)> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let (k, tie) = key(r);
            (!k, tie, i)
        })
        .collect();
    order.sort_unstable();
    order
        .iter()
        .map(|o| std::mem::take(&mut rows[o.2]))
        .collect()
}

/// Atrace names in name order (the tie-break of their tables).
fn by_name(m: &std::collections::HashMap<String, Agg>) -> Vec<(String, Agg)> {
    let mut v: Vec<(String, Agg)> = m.iter().map(|(k, a)| (k.clone(), *a)).collect();
    v.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    v
}

/// The text report; `top` rows per table.
pub fn text(w: &Walk, a: &Analysis, top: usize) -> String {
    let v = view(w, a);
    let m = &w.meta;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Trace: {} bytes, {} packets, {:.3} s, clock {}",
        w.bytes,
        m.packets,
        v.duration as f64 / 1e9,
        v.clock
    );
    if !m.machine.is_empty() {
        let kv: Vec<String> = m.machine.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(o, "Machine: {}", kv.join(" "));
    }
    if let Some((n, model)) = &m.cpu_model {
        let _ = writeln!(o, "CPUs: {n} x {model}");
    }
    if !v.sources.is_empty() {
        let _ = writeln!(o, "Data sources: {}", v.sources.join(", "));
    }
    if !v.events.is_empty() {
        let _ = writeln!(o, "Events configured: {}", v.events.join(" "));
    }
    let _ = writeln!(o, "\nLosses and problems:");
    if v.losses.is_empty() {
        let _ = writeln!(o, "  none recorded in the trace");
    }
    for (k, l) in &v.losses {
        let _ = writeln!(o, "  {k}: {l}");
    }
    if !a.cpus.is_empty() {
        let _ = writeln!(o, "\nCPU   busy%   idle%  unknown%  frequency residency");
    }
    for (c, cpu) in cpus(a) {
        let total = cpu.busy + cpu.idle + cpu.unknown;
        let known = cpu.busy + cpu.idle;
        let freq_total: u64 = cpu.residency.iter().map(|r| r.1).sum();
        let res = ranked(cpu.residency.clone(), |r| (0, r.0 as i64));
        let freqs: Vec<String> = res
            .iter()
            .map(|(khz, ns)| format!("{}MHz:{:.0}%", khz / 1000, pct(*ns, freq_total)))
            .collect();
        let line = format!(
            "{c:>3} {:>7.1} {:>7.1} {:>9.1}  {}",
            pct(cpu.busy, known),
            pct(cpu.idle, known),
            pct(cpu.unknown, total),
            freqs.join(" ")
        );
        let _ = writeln!(o, "{}", line.trim_end());
    }
    if !v.threads.is_empty() {
        let _ = writeln!(
            o,
            "\nTop threads by CPU time:\n{:>8} {:>8}  {:<16} {:>10} {:>9} {:>8}",
            "tid", "pid", "name", "cpu ms", "switches", "wakeups"
        );
    }
    for (tid, pid, name) in v.threads.iter().take(top) {
        let t = &a.threads[tid];
        let _ = writeln!(
            o,
            "{tid:>8} {pid:>8}  {name:<16} {:>10} {:>9} {:>8}",
            ms(t.cpu_ns),
            t.switches,
            t.wakeups
        );
    }
    if !v.procs.is_empty() {
        let _ = writeln!(
            o,
            "\nTop processes by CPU time:\n{:>8}  {:<40} {:>10} {:>8}",
            "pid", "command line (else name)", "cpu ms", "threads"
        );
    }
    for p in v.procs.iter().take(top) {
        let _ = writeln!(
            o,
            "{:>8}  {:<40} {:>10} {:>8}",
            p.pid,
            clip(&p.name, 40),
            ms(p.cpu_ns),
            p.threads
        );
    }
    let sw: u64 = a.threads.values().map(|t| t.switches).sum();
    let wk: u64 = a.threads.values().map(|t| t.wakeups).sum();
    let _ = writeln!(o, "\nContext switches: {sw}  wakeups: {wk}");
    let h = &a.latency;
    if h.count() > 0 {
        let _ = writeln!(
            o,
            "\nScheduling latency (waking -> running), {} wakeups: p50 {} ms  p90 {} ms  p99 {} ms  max {} ms",
            h.count(),
            ms(h.quantile(0.5)),
            ms(h.quantile(0.9)),
            ms(h.quantile(0.99)),
            ms(a.threads.values().map(|t| t.lat_max).max().unwrap_or(0))
        );
        let worst: Vec<(i32, u64)> = a
            .threads
            .iter()
            .filter(|t| t.1.lat_n > 0)
            .map(|t| (*t.0, t.1.lat_max))
            .collect();
        let worst = ranked(worst, |w| (w.1, w.0 as i64));
        let _ = writeln!(
            o,
            "{:>8}  {:<16} {:>10} {:>10} {:>8}",
            "tid", "name", "max ms", "avg ms", "count"
        );
        for (tid, _) in worst.into_iter().take(top.min(10)) {
            let t = &a.threads[&tid];
            let _ = writeln!(
                o,
                "{tid:>8}  {:<16} {:>10} {:>10} {:>8}",
                w.name(tid),
                ms(t.lat_max),
                ms(t.lat_sum / t.lat_n),
                t.lat_n
            );
        }
    }
    if a.events > 0 {
        let _ = write!(o, "\nEvents: {}\n{:<24} {:>10}", a.events, "event", "total");
        for (c, _) in cpus(a) {
            let _ = write!(o, " {:>9}", format!("cpu{c}"));
        }
        o.push('\n');
        let rows: Vec<(u32, Vec<u64>)> = counts(a).map(|(i, v)| (i, v.clone())).collect();
        for (id, per) in ranked(rows, |r| (r.1.iter().sum(), r.0 as i64)) {
            let name = event_name(id, &w.bundles.generic_names);
            let _ = write!(o, "{name:<24} {:>10}", per.iter().sum::<u64>());
            for (c, _) in cpus(a) {
                let _ = write!(o, " {:>9}", per.get(c).unwrap_or(&0));
            }
            o.push('\n');
        }
    }
    let slices = by_name(&a.slices);
    if !slices.is_empty() {
        for (title, longest) in [("total", false), ("longest", true)] {
            let key = |s: &Agg| if longest { s.max } else { s.total };
            let named: Vec<(usize, u64)> = slices.iter().map(|s| key(&s.1)).enumerate().collect();
            let order = ranked(named, |&(i, k)| (k, i as i64));
            let _ = writeln!(
                o,
                "\nAtrace slices by {title}:\n{:<32} {:>8} {:>12} {:>12}",
                "name", "count", "total ms", "max ms"
            );
            for (i, _) in order.into_iter().take(top) {
                let (n, s) = &slices[i];
                let _ = writeln!(
                    o,
                    "{n:<32} {:>8} {:>12} {:>12}",
                    s.count,
                    ms(s.total),
                    ms(s.max)
                );
            }
        }
    }
    let counters = by_name(&a.counters);
    if !counters.is_empty() {
        let _ = writeln!(
            o,
            "\nAtrace counters:\n{:<32} {:>8} {:>12} {:>12} {:>12}",
            "name", "count", "min", "max", "last"
        );
    }
    for (n, c) in counters.iter().take(top) {
        let _ = writeln!(
            o,
            "{n:<32} {:>8} {:>12} {:>12} {:>12}",
            c.count, c.min_v, c.max_v, c.last
        );
    }
    o
}

/// `json` (an object and a newline, as [`json`] makes it) with one more
/// member, `key`: `value` (JSON).
pub fn with_field(mut json: String, key: &str, value: &str) -> String {
    let body = json.trim_end().len();
    json.truncate(body.saturating_sub(1));
    let _ = writeln!(json, ",{}:{value}}}", js(key));
    json
}

/// The JSON report: every thread, slice and counter.
pub fn json(w: &Walk, a: &Analysis) -> String {
    let v = view(w, a);
    let m = &w.meta;
    let mut o = String::from("{");
    let list = |items: &[String]| items.iter().map(|s| js(s)).collect::<Vec<_>>().join(",");
    let _ = write!(
        o,
        "\"bytes\":{},\"packets\":{},\"start_ns\":{},\"end_ns\":{},\"duration_ns\":{},\"clock\":{},\"complete\":{},",
        w.bytes,
        m.packets,
        a.start.unwrap_or(0),
        a.end,
        v.duration,
        js(&v.clock),
        w.error.is_none()
    );
    let machine: Vec<String> = m
        .machine
        .iter()
        .map(|(k, v)| format!("{}:{}", js(k), js(v)))
        .collect();
    let cpu_info = match &m.cpu_model {
        Some((n, model)) => format!("{{\"count\":{n},\"model\":{}}}", js(model)),
        None => "null".into(),
    };
    let _ = write!(
        o,
        "\"machine\":{{{}}},\"cpu_info\":{cpu_info},\"data_sources\":[{}],\"events_configured\":[{}],",
        machine.join(","),
        list(&v.sources),
        list(&v.events)
    );
    let losses: Vec<String> = v
        .losses
        .iter()
        .map(|(k, l)| format!("[{},{}]", js(k), js(l)))
        .collect();
    let _ = write!(o, "\"losses\":[{}],\"cpus\":[", losses.join(","));
    for (i, (c, cpu)) in cpus(a).enumerate() {
        let freq: Vec<String> = cpu
            .residency
            .iter()
            .map(|(k, n)| format!("[{k},{n}]"))
            .collect();
        let _ = write!(
            o,
            "{}{{\"cpu\":{c},\"busy_ns\":{},\"idle_ns\":{},\"unknown_ns\":{},\"freq_khz_ns\":[{}]}}",
            if i > 0 { "," } else { "" },
            cpu.busy,
            cpu.idle,
            cpu.unknown,
            freq.join(",")
        );
    }
    o.push_str("],\"threads\":[");
    for (i, (tid, pid, name)) in v.threads.iter().enumerate() {
        let t = &a.threads[tid];
        let _ = write!(
            o,
            "{}{{\"tid\":{tid},\"pid\":{pid},\"name\":{},\"cpu_ns\":{},\"switches\":{},\"wakeups\":{},\"latency_count\":{},\"latency_max_ns\":{},\"latency_sum_ns\":{}}}",
            if i > 0 { "," } else { "" },
            js(name),
            t.cpu_ns,
            t.switches,
            t.wakeups,
            t.lat_n,
            t.lat_max,
            t.lat_sum
        );
    }
    o.push_str("],\"processes\":[");
    for (i, p) in v.procs.iter().enumerate() {
        let _ = write!(
            o,
            "{}{{\"pid\":{},\"name\":{},\"cpu_ns\":{},\"threads\":{}}}",
            if i > 0 { "," } else { "" },
            p.pid,
            js(&p.name),
            p.cpu_ns,
            p.threads
        );
    }
    let h = &a.latency;
    let _ = write!(
        o,
        "],\"latency\":{{\"count\":{},\"p50_ns\":{},\"p90_ns\":{},\"p99_ns\":{},\"max_ns\":{}}},\"events\":{},\"event_counts\":[",
        h.count(),
        h.quantile(0.5),
        h.quantile(0.9),
        h.quantile(0.99),
        a.threads.values().map(|t| t.lat_max).max().unwrap_or(0),
        a.events
    );
    for (i, (id, per)) in counts(a).enumerate() {
        let per: Vec<String> = per.iter().map(u64::to_string).collect();
        let _ = write!(
            o,
            "{}{{\"name\":{},\"per_cpu\":[{}]}}",
            if i > 0 { "," } else { "" },
            js(event_name(id, &w.bundles.generic_names)),
            per.join(",")
        );
    }
    o.push_str("],\"slices\":[");
    for (i, (n, s)) in by_name(&a.slices).iter().enumerate() {
        let _ = write!(
            o,
            "{}{{\"name\":{},\"count\":{},\"total_ns\":{},\"max_ns\":{}}}",
            if i > 0 { "," } else { "" },
            js(n),
            s.count,
            s.total,
            s.max
        );
    }
    o.push_str("],\"counters\":[");
    for (i, (n, c)) in by_name(&a.counters).iter().enumerate() {
        let _ = write!(
            o,
            "{}{{\"name\":{},\"count\":{},\"min\":{},\"max\":{},\"last\":{}}}",
            if i > 0 { "," } else { "" },
            js(n),
            c.count,
            c.min_v,
            c.max_v,
            c.last
        );
    }
    o.push_str("]}\n");
    o
}

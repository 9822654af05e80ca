//! The one-line live status shown on a terminal while a trace records:
//! elapsed time out of the total, bytes that reached traced (and the
//! output file, when traced writes it), data lost so far;
//! and the line printed when a trace ends, terminal or not, so losses are
//! seen without opening the trace.

use crate::pb::protos::TraceStats;

/// Bytes and losses summed over all buffers of a session.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Figures {
    pub bytes_written: u64,
    pub chunks_lost: u64,
    pub packets_lost: u64,
    /// Of `chunks_lost`: overwritten by newer data (a full ring buffer).
    pub chunks_overwritten: u64,
}

pub fn figures(stats: &TraceStats) -> Figures {
    let mut f = Figures::default();
    for b in &stats.buffer_stats {
        f.bytes_written += b.bytes_written.unwrap_or(0);
        f.chunks_overwritten += b.chunks_overwritten.unwrap_or(0);
        f.chunks_lost += b.chunks_overwritten.unwrap_or(0)
            + b.chunks_discarded.unwrap_or(0)
            + b.abi_violations.unwrap_or(0);
        f.packets_lost += b.trace_writer_packet_loss.unwrap_or(0);
    }
    // TraceStats.chunks_discarded is service-wide (other sessions' and
    // hostile producers' commits): not this session's loss.
    f.packets_lost += stats.invalid_packets.unwrap_or(0);
    f
}

fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

/// Renders the line; `total_ms` is 0 for an open-ended trace. `file`:
/// what the output file holds so far (write_into_file), if known.
pub fn render(elapsed_ms: u64, total_ms: u64, f: Figures, file: Option<u64>) -> String {
    let time = if total_ms > 0 {
        format!(
            "{:.1}s / {:.1}s",
            elapsed_ms as f64 / 1000.0,
            total_ms as f64 / 1000.0
        )
    } else {
        format!("{:.1}s", elapsed_ms as f64 / 1000.0)
    };
    let lost = if f.chunks_lost == 0 && f.packets_lost == 0 {
        "nothing lost".to_owned()
    } else {
        format!("LOST {} chunks, {} packets", f.chunks_lost, f.packets_lost)
    };
    let limits = limits_text(LIMITS.get().copied().unwrap_or_default());
    let file = file.map_or(String::new(), |b| {
        format!(", {} in the file", human_bytes(b))
    });
    format!(
        "[{time}{limits}] {} recorded{file}, {lost}",
        human_bytes(f.bytes_written)
    )
}

/// The end-of-trace line. Overwritten chunks are named apart: in a ring
/// buffer they are the oldest data making room, not a failure.
/// `kernel_events_lost`: ftrace events the kernel overwrote or dropped
/// before traced_probes read them (from the trace's ftrace_stats).
pub fn summary(f: Figures, kernel_events_lost: u64) -> String {
    let service_lost = f.chunks_lost != 0 || f.packets_lost != 0;
    let kernel = format!("{kernel_events_lost} ftrace events in the kernel");
    if !service_lost {
        return match kernel_events_lost {
            0 => NOTHING_LOST.to_owned(),
            _ => format!(
                "Trace stats: LOST {kernel} (per-cpu buffers overran before they were \
                 read; a larger buffer_size_kb keeps them)"
            ),
        };
    }
    let dropped = f.chunks_lost - f.chunks_overwritten.min(f.chunks_lost);
    let (kernel, details) = match kernel_events_lost {
        0 => (String::new(), "trace_stats"),
        _ => (format!(", {kernel}"), "trace_stats and ftrace_stats"),
    };
    let mut line = format!(
        "Trace stats: LOST {dropped} chunks dropped, {} chunks overwritten, {} packets\
         {kernel} (details: {details} in the trace)",
        f.chunks_overwritten, f.packets_lost
    );
    if f.chunks_overwritten > 0 {
        line.push_str(WRAP_HINT);
    }
    line
}

/// Second line when a ring buffer wrapped.
pub const WRAP_HINT: &str = "\nThe ring buffer wrapped and its oldest data made room: a larger \
                             -b (or buffers { size_kb }) keeps more.";

/// What the user asked that the live line shows besides the time.
#[derive(Debug, Default, Clone, Copy)]
pub struct Limits {
    /// `-s` / max_file_size_bytes.
    pub max_file_bytes: u64,
    /// trigger_config.trigger_timeout_ms.
    pub trigger_timeout_ms: u64,
}

static LIMITS: std::sync::OnceLock<Limits> = std::sync::OnceLock::new();

/// Set once by the client before the session starts.
pub fn set_limits(l: Limits) {
    let _ = LIMITS.set(l);
}

fn limits_text(l: Limits) -> String {
    let mut s = String::new();
    if l.max_file_bytes > 0 {
        s.push_str(&format!(", stops at {}", human_bytes(l.max_file_bytes)));
    }
    if l.trigger_timeout_ms > 0 {
        s.push_str(&format!(
            ", trigger timeout {:.0}s",
            l.trigger_timeout_ms as f64 / 1000.0
        ));
    }
    s
}

/// The end-of-trace line: the losses, then everything asked for and not
/// obtained (`missing`, one phrase each). "nothing lost" only when both
/// are empty.
pub fn end_line(losses: String, missing: &[String]) -> String {
    if missing.is_empty() {
        return losses;
    }
    let incomplete = format!("INCOMPLETE: {}", missing.join("; "));
    if losses == NOTHING_LOST {
        return format!("Trace stats: no data lost, but {incomplete}");
    }
    // The clause joins the losses' own line; a hint below it stays last.
    match losses.split_once('\n') {
        Some((first, hint)) => format!("{first}; {incomplete}\n{hint}"),
        None => format!("{losses}; {incomplete}"),
    }
}

/// The end-of-trace line when traced's own figures are missing: the
/// losses the trace itself shows, never "no data lost".
pub fn end_line_without_service(losses: String, missing: &[String]) -> String {
    match losses == NOTHING_LOST {
        true => format!("Trace stats: INCOMPLETE: {}", missing.join("; ")),
        false => end_line(losses, missing),
    }
}

/// `line` with `notes` (things that lose nothing but a user should know)
/// joined to its first line, before a hint below it.
pub fn with_notes(line: String, notes: &[String]) -> String {
    if notes.is_empty() {
        return line;
    }
    let notes = notes.join("; ");
    match line.split_once('\n') {
        Some((first, hint)) => format!("{first}; {notes}\n{hint}"),
        None => format!("{line}; {notes}"),
    }
}

pub const NOTHING_LOST: &str = "Trace stats: nothing lost";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::protos::mod_TraceStats::BufferStats;

    #[test]
    fn sums_buffers_and_reports_losses() {
        let stats = TraceStats {
            buffer_stats: vec![
                BufferStats {
                    bytes_written: Some(3 << 20),
                    chunks_overwritten: Some(2),
                    ..Default::default()
                },
                BufferStats {
                    bytes_written: Some(1 << 20),
                    trace_writer_packet_loss: Some(1),
                    ..Default::default()
                },
            ],
            invalid_packets: Some(4),
            ..Default::default()
        };
        let f = figures(&stats);
        assert_eq!(
            f,
            Figures {
                bytes_written: 4 << 20,
                chunks_lost: 2,
                packets_lost: 5,
                chunks_overwritten: 2,
            }
        );
        assert_eq!(
            summary(f, 0),
            format!(
                "Trace stats: LOST 0 chunks dropped, 2 chunks overwritten, 5 packets \
                 (details: trace_stats in the trace){WRAP_HINT}"
            )
        );
        assert_eq!(
            summary(f, 7),
            format!(
                "Trace stats: LOST 0 chunks dropped, 2 chunks overwritten, 5 packets, \
                 7 ftrace events in the kernel (details: trace_stats and ftrace_stats in the \
                 trace){WRAP_HINT}"
            )
        );
        let clean = Figures {
            bytes_written: 100,
            ..Default::default()
        };
        assert_eq!(summary(clean, 0), "Trace stats: nothing lost");
        assert_eq!(
            summary(clean, 3),
            "Trace stats: LOST 3 ftrace events in the kernel (per-cpu buffers overran \
             before they were read; a larger buffer_size_kb keeps them)"
        );
        assert_eq!(
            end_line(
                summary(clean, 0),
                &["no producer offers data source x".into()]
            ),
            "Trace stats: no data lost, but INCOMPLETE: no producer offers data source x"
        );
        assert_eq!(
            end_line(summary(clean, 0), &[]),
            "Trace stats: nothing lost"
        );
        let unknown = ["traced did not report".to_owned()];
        assert_eq!(
            end_line_without_service(summary(Figures::default(), 0), &unknown),
            "Trace stats: INCOMPLETE: traced did not report"
        );
        assert_eq!(
            end_line_without_service(summary(Figures::default(), 3), &unknown),
            "Trace stats: LOST 3 ftrace events in the kernel (per-cpu buffers overran before \
             they were read; a larger buffer_size_kb keeps them); INCOMPLETE: traced did not \
             report"
        );
        let discarded_elsewhere = TraceStats {
            chunks_discarded: Some(3),
            ..Default::default()
        };
        assert_eq!(
            summary(figures(&discarded_elsewhere), 0),
            "Trace stats: nothing lost",
            "service-wide discards are not the session's"
        );
        assert_eq!(
            render(1500, 10_000, f, None),
            "[1.5s / 10.0s] 4.0 MB recorded, LOST 2 chunks, 5 packets"
        );
        assert_eq!(
            render(0, 0, Figures::default(), None),
            "[0.0s] 0 B recorded, nothing lost"
        );
        assert_eq!(
            render(0, 0, Figures::default(), Some(2048)),
            "[0.0s] 0 B recorded, 2.0 KB in the file, nothing lost"
        );
        let l = Limits {
            max_file_bytes: 1 << 30,
            trigger_timeout_ms: 30_000,
        };
        assert_eq!(limits_text(l), ", stops at 1.0 GB, trigger timeout 30s");
        assert_eq!(limits_text(Limits::default()), "");
    }

    #[test]
    fn the_incomplete_clause_joins_the_losses_line_above_the_wrap_hint() {
        let losses = format!("Trace stats: LOST 0 chunks dropped, 3 chunks overwritten{WRAP_HINT}");
        let line = end_line(losses, &["no producer offers data source x".to_owned()]);
        assert_eq!(
            line,
            format!(
                "Trace stats: LOST 0 chunks dropped, 3 chunks overwritten; INCOMPLETE: no \
                 producer offers data source x{WRAP_HINT}"
            )
        );
    }

    /// A note (a stopped rotation) joins the first line whatever it says,
    /// never turning "nothing lost" into "INCOMPLETE".
    #[test]
    fn notes_join_the_first_line() {
        let note = ["rotation stopped, a file holds more than --rotate-* asked: x".to_owned()];
        assert_eq!(
            with_notes(NOTHING_LOST.to_owned(), &note),
            format!("{NOTHING_LOST}; {}", note[0])
        );
        assert_eq!(
            with_notes(format!("Trace stats: LOST 3 chunks{WRAP_HINT}"), &note),
            format!("Trace stats: LOST 3 chunks; {}{WRAP_HINT}", note[0])
        );
        assert_eq!(with_notes(NOTHING_LOST.to_owned(), &[]), NOTHING_LOST);
    }
}

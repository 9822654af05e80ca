//! What the user asked for and did not get, as the trace itself tells:
//! ftrace events and atrace categories traced_probes could not set up (in
//! the end-of-trace `ftrace_stats`), and the service events traced writes
//! for producers that vanished, data sources no producer offers or that
//! never started, instances refused and config fields not honoured (see
//! `schema::service_events`). The end-of-trace line names each.
//!
//! The trace is only as trusted as its producers: lists and strings are
//! bounded, and what does not parse is skipped.

use crate::protozero::decode::{read_varint, FieldIter};
use crate::schema::service_events::field;

/// `TracingServiceEvent.tracing_started`.
const TRACING_STARTED: u32 = 2;
/// Entries kept per list, bytes kept per string.
const MAX_ITEMS: usize = 64;
const MAX_STRING: usize = 200;

/// Data sources traced_probes offers, and other common ones: the names
/// "did you mean" picks from.
const KNOWN_DATA_SOURCES: &[&str] = &[
    "linux.ftrace",
    "linux.process_stats",
    "linux.sys_stats",
    "linux.system_info",
    "android.power",
    "linux.perf",
    "track_event",
    "android.log",
    "android.packages_list",
    "android.heapprofd",
    "android.java_hprof",
    "linux.inode_file_map",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    UnknownEvent,
    FailedEvent,
    AtraceError,
}

/// One producer that vanished mid-trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vanished {
    pub ts: u64,
    pub producer: String,
    pub data_sources: Vec<String>,
    /// A relayed producer: what it wrote this many ms before the
    /// disconnect may not have been committed.
    pub uncommitted_window_ms: Option<u64>,
}

#[derive(Debug, Default, Clone)]
pub struct TraceFaults {
    pub unknown_events: Vec<String>,
    pub failed_events: Vec<String>,
    pub atrace_errors: Vec<String>,
    pub vanished: Vec<Vanished>,
    pub not_offered: Vec<String>,
    /// `producer: data source` that never reported started.
    pub not_started: Vec<String>,
    /// Data sources that had not answered the final flush in time.
    pub slow_final_flush: Vec<String>,
    /// Data sources still stopping when the stop timeout ran out.
    pub stop_timed_out: Vec<String>,
    pub refused: Vec<String>,
    pub ignored_fields: Vec<String>,
    /// Relay connections traced dropped for their identity frame.
    pub relay_drops: u64,
    /// `(producer, chunks)` that never reached traced (emulation gaps).
    pub never_arrived: Vec<(String, u64)>,
    /// Rotation cuts that could not happen, as the client named them.
    pub rotation_stopped: Vec<String>,
    pub tracing_started_ts: Option<u64>,
    /// `trigger` packets in the trace.
    pub triggers: u64,
    /// Relayed machines seen on packets, and whether the trace has a
    /// `remote_clock_sync` for each.
    pub machines: Vec<(u64, bool)>,
}

fn text(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_STRING)]);
    s.chars().filter(|c| !c.is_control()).collect()
}

fn push_unique(list: &mut Vec<String>, s: String) {
    if list.len() < MAX_ITEMS && !list.contains(&s) {
        list.push(s);
    }
}

/// `(producer, data source)` of each entry of a `DataSources` message.
fn data_sources(bytes: &[u8]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for f in FieldIter::new(bytes) {
        if (f.number, f.wire_type) != (1, 2) || out.len() >= MAX_ITEMS {
            continue;
        }
        let (mut producer, mut ds) = (String::new(), String::new());
        for g in FieldIter::new(f.value) {
            match (g.number, g.wire_type) {
                (1, 2) => producer = text(g.value),
                (2, 2) => ds = text(g.value),
                _ => {}
            }
        }
        out.push((producer, ds));
    }
    out
}

impl TraceFaults {
    /// A string of an end-of-trace `ftrace_stats`.
    pub fn add(&mut self, kind: Missing, bytes: &[u8]) {
        let list = match kind {
            Missing::UnknownEvent => &mut self.unknown_events,
            Missing::FailedEvent => &mut self.failed_events,
            Missing::AtraceError => &mut self.atrace_errors,
        };
        push_unique(list, text(bytes));
    }

    /// A packet of relayed machine `id`; `clock_sync`: it is that
    /// machine's `remote_clock_sync`.
    pub fn observe_machine(&mut self, id: u64, clock_sync: bool) {
        match self.machines.iter().position(|m| m.0 == id) {
            Some(i) => self.machines[i].1 |= clock_sync,
            None if self.machines.len() < MAX_ITEMS => self.machines.push((id, clock_sync)),
            None => {}
        }
    }

    /// Relayed machines whose clocks the trace cannot align with traced's:
    /// no `remote_clock_sync` came (the relay's RelayPort link was not up).
    pub fn unsynced_machines_phrase(&self) -> Option<String> {
        let ids: Vec<String> = self
            .machines
            .iter()
            .filter(|m| !m.1)
            .map(|m| m.0.to_string())
            .collect();
        (!ids.is_empty()).then(|| {
            format!(
                "no clock sync for relayed machine {} (its traced_relay's RelayPort link was \
                 not up: traced serves it with --enable-relay-endpoint), so its timestamps \
                 are not aligned with this machine's",
                ids.join(", ")
            )
        })
    }

    /// One `TracingServiceEvent`, written at boot time `ts`.
    pub fn observe_service_event(&mut self, ts: u64, event_untrusted: &[u8]) {
        let vanished_before = self.vanished.len();
        let mut window_ms = None;
        for f in FieldIter::new(event_untrusted) {
            match (f.number, f.wire_type) {
                (TRACING_STARTED, 0) if read_varint(f.value).is_some_and(|v| v.0 != 0) => {
                    self.tracing_started_ts.get_or_insert(ts);
                }
                (field::PRODUCER_DISCONNECTED, 2) if self.vanished.len() < MAX_ITEMS => {
                    let list = data_sources(f.value);
                    let producer = list.first().map(|d| d.0.clone()).unwrap_or_default();
                    let data_sources = list.into_iter().map(|d| d.1).collect();
                    self.vanished.push(Vanished {
                        ts,
                        producer,
                        data_sources,
                        uncommitted_window_ms: None,
                    });
                }
                (field::UNCOMMITTED_WINDOW_MS, 0) => {
                    window_ms = read_varint(f.value).map(|v| v.0);
                }
                (field::DATA_SOURCES_NOT_OFFERED, 2) => {
                    for (_, ds) in data_sources(f.value) {
                        push_unique(&mut self.not_offered, ds);
                    }
                }
                (field::SLOW_STARTING_DATA_SOURCES, 2) => {
                    for (p, ds) in data_sources(f.value) {
                        push_unique(&mut self.not_started, format!("{ds} in {p}"));
                    }
                }
                (field::LAST_FLUSH_SLOW_DATA_SOURCES, 2) => {
                    for (p, ds) in data_sources(f.value) {
                        push_unique(&mut self.slow_final_flush, format!("{ds} in {p}"));
                    }
                }
                (field::DATA_SOURCES_STOP_TIMED_OUT, 2) => {
                    for (p, ds) in data_sources(f.value) {
                        push_unique(&mut self.stop_timed_out, format!("{ds} in {p}"));
                    }
                }
                (field::DATA_SOURCES_NOT_SET_UP, 2) => {
                    for (p, ds) in data_sources(f.value) {
                        let entry = match p.is_empty() {
                            true => ds,
                            false => format!("{ds} in {p}"),
                        };
                        push_unique(&mut self.refused, entry);
                    }
                }
                (field::CONFIG_FIELDS_IGNORED, 2) => {
                    push_unique(&mut self.ignored_fields, text(f.value));
                }
                (field::ROTATION_STOPPED, 2) => {
                    push_unique(&mut self.rotation_stopped, text(f.value));
                }
                (field::CHUNKS_NEVER_ARRIVED, 2) => {
                    let (mut who, mut n) = (String::new(), 0);
                    for g in FieldIter::new(f.value) {
                        match (g.number, g.wire_type) {
                            (1, 2) => who = text(g.value),
                            (2, 0) => n = read_varint(g.value).map_or(0, |v| v.0),
                            _ => {}
                        }
                    }
                    let list = &mut self.never_arrived;
                    match list.iter().position(|(w, _)| *w == who) {
                        Some(i) => list[i].1 = list[i].1.saturating_add(n),
                        None if list.len() < MAX_ITEMS => list.push((who, n)),
                        None => {}
                    }
                }
                (field::RELAY_CONNECTIONS_DROPPED, 0) => {
                    let n = read_varint(f.value).map_or(0, |v| v.0);
                    self.relay_drops = self.relay_drops.saturating_add(n);
                }
                _ => {}
            }
        }
        for v in &mut self.vanished[vanished_before..] {
            v.uncommitted_window_ms = window_ms;
        }
    }

    /// One phrase per thing asked for and not obtained, in the order the
    /// end-of-trace line names them.
    pub fn phrases(&self) -> Vec<String> {
        let mut out = Vec::new();
        for v in &self.vanished {
            let when = match self.tracing_started_ts {
                Some(t0) if v.ts >= t0 => {
                    format!("{:.1} s into the trace", (v.ts - t0) as f64 / 1e9)
                }
                _ => format!("at boot time {:.3} s", v.ts as f64 / 1e9),
            };
            let kept = match v.uncommitted_window_ms {
                Some(ms) => format!(
                    "data of the last \u{2264} {ms} ms before the disconnect may be missing"
                ),
                None => "what it had written is kept".to_string(),
            };
            out.push(format!(
                "producer {} disconnected {when} (its {} stopped; {kept})",
                v.producer,
                v.data_sources.join(", ")
            ));
        }
        for ds in &self.not_offered {
            let hint = match suggest(ds) {
                Some(s) => format!(" (did you mean {s}?)"),
                None => String::new(),
            };
            out.push(format!("no producer offers data source {ds}{hint}"));
        }
        if !self.not_started.is_empty() {
            out.push(format!(
                "data sources that never started (setup failed? see the producer's log): {}",
                self.not_started.join(", ")
            ));
        }
        if !self.slow_final_flush.is_empty() {
            out.push(format!(
                "data sources that did not answer the final flush within flush_timeout_ms \
                 (what they held then may be missing): {}",
                self.slow_final_flush.join(", ")
            ));
        }
        if !self.stop_timed_out.is_empty() {
            out.push(format!(
                "data sources that did not stop within data_source_stop_timeout_ms (what \
                 they wrote after is not in the trace): {}",
                self.stop_timed_out.join(", ")
            ));
        }
        if !self.refused.is_empty() {
            out.push(format!(
                "data sources traced could not set up (over the per-session limit of \
                 instances, or no shared memory for the producer; see traced's log): {}",
                self.refused.join(", ")
            ));
        }
        if !self.unknown_events.is_empty() {
            out.push(format!(
                "unknown ftrace events or atrace categories: {}",
                self.unknown_events.join(", ")
            ));
        }
        if !self.failed_events.is_empty() {
            out.push(format!(
                "ftrace events that could not be enabled: {}",
                self.failed_events.join(", ")
            ));
        }
        for e in &self.atrace_errors {
            out.push(format!("atrace failed: {e}"));
        }
        for f in &self.ignored_fields {
            out.push(format!("config fields traced does not honour: {f}"));
        }
        for (who, n) in &self.never_arrived {
            out.push(format!(
                "{n} chunks of producer {who} never reached traced (it could not send them \
                 inline)"
            ));
        }
        if self.relay_drops > 0 {
            out.push(format!(
                "{} relay connections dropped for a missing, repeated or invalid \
                 SetPeerIdentity (nothing they sent was recorded)",
                self.relay_drops
            ));
        }
        out
    }

    /// What the end line notes without calling the trace incomplete: a
    /// stopped rotation loses nothing (the trace goes on in the current
    /// file), it only leaves a file larger than asked.
    pub fn notes(&self) -> Vec<String> {
        self.rotation_stopped
            .iter()
            .map(|r| format!("rotation stopped, a file holds more than --rotate-* asked: {r}"))
            .collect()
    }
}

/// The closest known data source name, if it is a likely typo of `name`.
pub fn suggest(name: &str) -> Option<&'static str> {
    nearest(name, KNOWN_DATA_SOURCES.iter().copied())
}

/// The candidate closest to `name` if it is a likely typo of it (a few
/// edits away, not equal).
pub fn nearest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let best = candidates.map(|k| (edit_distance(name, k), k)).min()?;
    (best.0 > 0 && best.0 <= 2.max(name.len() / 5)).then_some(best.1)
}

/// Levenshtein distance over bytes (names are short ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, &x) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &y) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + (x != y) as usize)
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::service_events::data_sources_event;

    #[test]
    fn service_events_become_phrases() {
        let mut f = TraceFaults::default();
        f.observe_service_event(1_000_000_000, &[0x10, 0x01]); // tracing_started
        let gone = data_sources_event(
            field::PRODUCER_DISCONNECTED,
            &[("perfetto.traced_probes".into(), "linux.ftrace".into())],
        );
        f.observe_service_event(3_100_000_000, &gone);
        let missing = data_sources_event(
            field::DATA_SOURCES_NOT_OFFERED,
            &[(String::new(), "linux.ftrce".into())],
        );
        f.observe_service_event(4_000_000_000, &missing);
        f.add(Missing::UnknownEvent, b"shed");
        f.add(Missing::UnknownEvent, b"shed");
        let mut relayed = data_sources_event(
            field::PRODUCER_DISCONNECTED,
            &[(
                "perfetto.traced_probes on machine board-b".into(),
                "linux.sys_stats".into(),
            )],
        );
        let mut w = crate::protozero::VecStream::new();
        crate::protozero::put_varint(&mut w, field::UNCOMMITTED_WINDOW_MS, 1000);
        relayed.extend_from_slice(w.as_bytes());
        f.observe_service_event(5_000_000_000, &relayed);
        assert_eq!(
            f.phrases(),
            [
                "producer perfetto.traced_probes disconnected 2.1 s into the trace \
                 (its linux.ftrace stopped; what it had written is kept)",
                "producer perfetto.traced_probes on machine board-b disconnected 4.0 s into \
                 the trace (its linux.sys_stats stopped; data of the last \u{2264} 1000 ms \
                 before the disconnect may be missing)",
                "no producer offers data source linux.ftrce (did you mean linux.ftrace?)",
                "unknown ftrace events or atrace categories: shed",
            ]
        );
    }

    #[test]
    fn suggestions_only_for_near_names() {
        assert_eq!(suggest("linux.ftrce"), Some("linux.ftrace"));
        assert_eq!(suggest("linux.process_stat"), Some("linux.process_stats"));
        assert_eq!(suggest("com.example.mine"), None);
        assert_eq!(suggest("linux.ftrace"), None);
    }

    #[test]
    fn garbage_never_panics() {
        let mut f = TraceFaults::default();
        let ev = data_sources_event(field::PRODUCER_DISCONNECTED, &[("p".into(), "d".into())]);
        for cut in 0..ev.len() {
            f.observe_service_event(0, &ev[..cut]);
            let mut flipped = ev.clone();
            flipped[cut] ^= 0xFF;
            f.observe_service_event(0, &flipped);
        }
        f.phrases();
    }
}

//! What the events say, fed in time order: cpu time per cpu and per
//! thread, frequency residency, switches, wakeups, waking-to-running
//! latency, event counts and atrace slices and counters. State is per cpu,
//! per thread and per distinct name, never per event. (Vecs and one map
//! type per key kind: every distinct map type costs binary size.)

use std::collections::HashMap;

use super::ftrace::{
    Ev, Rec, CPU_FREQUENCY, GENERIC_BASE, MAX_CPUS, MAX_GENERIC_NAMES, NO_CPU, SCHED_SWITCH,
};
use super::ftrace::{SCHED_WAKEUP, SCHED_WAKING};
use crate::protozero::decimal::parse_decimal;
use crate::protozero::decode::{read_varint, FieldIter};
use crate::traced_probes::ftrace::parse::table::ftrace_event;

/// Distinct atrace names (slices, counters, open async slices) kept; more
/// are counted in `atrace_dropped`.
pub const MAX_NAMES: usize = 8192;
const MAX_DEPTH: usize = 64;
/// Threads tracked (pid_max is at most 2^22); events of further threads
/// go to one overflow entry (tid `i32::MIN`) and are counted.
pub const MAX_THREADS: usize = 1 << 22;
/// Count slots: FtraceEvent field ids below this, then generic events.
const ID_SLOTS: u32 = 1024;
const UNKNOWN: i32 = -2;

#[derive(Debug, Default, Clone)]
pub struct Thread {
    pub cpu_ns: u64,
    pub switches: u64,
    pub wakeups: u64,
    pub lat_n: u64,
    pub lat_sum: u64,
    pub lat_max: u64,
    waking: u64,
    /// Open atrace `B` slices: name, start.
    stack: Vec<(String, u64)>,
}

#[derive(Debug, Default, Clone)]
pub struct Cpu {
    pub seen: bool,
    running: i32,
    since: u64,
    pub busy: u64,
    pub idle: u64,
    pub unknown: u64,
    freq: u64,
    freq_since: u64,
    /// (kHz, ns).
    pub residency: Vec<(u64, u64)>,
}

/// Log-linear histogram: 16 buckets per power of two (6% resolution).
#[derive(Debug, Clone)]
pub struct Hist(Vec<u64>);

impl Default for Hist {
    fn default() -> Self {
        Hist(vec![0; 64 * 16])
    }
}

impl Hist {
    fn add(&mut self, v: u64) {
        let i = if v < 16 {
            v as usize
        } else {
            let e = 63 - v.leading_zeros() as usize;
            (e - 3) * 16 + ((v >> (e - 4)) & 15) as usize
        };
        let last = self.0.len() - 1;
        self.0[i.min(last)] += 1;
    }

    pub fn count(&self) -> u64 {
        self.0.iter().sum()
    }

    /// The bucket midpoint at quantile `q` (0..=1).
    pub fn quantile(&self, q: f64) -> u64 {
        let n = self.count();
        let want = ((n as f64 * q).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.0.iter().enumerate() {
            seen += c;
            if seen >= want {
                if i < 16 {
                    return i as u64;
                }
                let (e, sub) = (i / 16 + 3, (i % 16) as u64);
                let lo = (16 + sub) << (e - 4);
                return lo + (1 << (e - 4)) / 2;
            }
        }
        0
    }
}

/// A slice name's durations, or a counter's values (min, max, last), or
/// an open async slice (`total` is its start).
#[derive(Debug, Default, Clone, Copy)]
pub struct Agg {
    pub count: u64,
    pub total: u64,
    pub max: u64,
    pub min_v: f64,
    pub max_v: f64,
    pub last: f64,
}

#[derive(Debug, Default)]
pub struct Analysis {
    pub since: u64,
    pub until: u64,
    pub start: Option<u64>,
    pub end: u64,
    pub events: u64,
    /// Indexed by cpu number (`seen` tells which exist).
    pub cpus: Vec<Cpu>,
    pub threads: HashMap<i32, Thread>,
    pub latency: Hist,
    /// Count per cpu, indexed by [`slot`] of the event id.
    pub counts: Vec<Vec<u64>>,
    pub slices: HashMap<String, Agg>,
    pub counters: HashMap<String, Agg>,
    pub atrace_dropped: u64,
    pub atrace_unmatched: u64,
    pub threads_over_limit: u64,
    /// Open async slices by "name\0cookie".
    open_async: HashMap<String, Agg>,
}

/// Count slot of an event id; ids past the table share the last slot.
/// The count slot of an event id. Generic events have at most
/// `MAX_GENERIC_NAMES` slots; any other id (an untrusted field number)
/// shares the last fixed slot, so no input can grow the table.
fn slot(id: u32) -> usize {
    match id.checked_sub(GENERIC_BASE) {
        Some(g) if (g as usize) < MAX_GENERIC_NAMES => ID_SLOTS as usize + g as usize,
        _ => id.min(ID_SLOTS - 1) as usize,
    }
}

/// The event id of a count slot.
pub fn slot_id(s: usize) -> u32 {
    match s as u32 {
        s if s >= ID_SLOTS => GENERIC_BASE + s - ID_SLOTS,
        s => s,
    }
}

fn varint_field(p: &[u8], n: u32) -> u64 {
    FieldIter::new(p)
        .find(|f| f.number == n && f.wire_type == 0)
        .and_then(|f| read_varint(f.value))
        .map_or(0, |v| v.0)
}

/// Adds to a capped name table; false (and counted) when full.
fn named<'a>(
    map: &'a mut HashMap<String, Agg>,
    name: &str,
    dropped: &mut u64,
) -> Option<&'a mut Agg> {
    if !map.contains_key(name) {
        if map.len() >= MAX_NAMES {
            *dropped += 1;
            return None;
        }
        map.insert(name.to_owned(), Agg::default());
    }
    map.get_mut(name)
}

impl Analysis {
    pub fn new(since: u64, until: u64) -> Self {
        Analysis {
            since,
            until,
            ..Default::default()
        }
    }

    fn clip(&self, a: u64, b: u64) -> u64 {
        b.min(self.until).saturating_sub(a.max(self.since))
    }

    fn inside(&self, ts: u64) -> bool {
        ts >= self.since && ts <= self.until
    }

    pub fn thread(&mut self, tid: i32) -> &mut Thread {
        let full = self.threads.len() >= MAX_THREADS;
        let tid = if full && !self.threads.contains_key(&tid) {
            self.threads_over_limit += 1;
            i32::MIN
        } else {
            tid
        };
        self.threads.entry(tid).or_default()
    }

    /// The cpu's state (`c` < [`MAX_CPUS`], checked by the callers).
    fn cpu(&mut self, c: u32) -> &mut Cpu {
        let start = self.start.unwrap_or(0);
        let c = c as usize;
        if self.cpus.len() <= c {
            self.cpus.resize(c + 1, Cpu::default());
        }
        let cpu = &mut self.cpus[c];
        if !cpu.seen {
            *cpu = Cpu {
                seen: true,
                running: UNKNOWN,
                since: start,
                freq_since: start,
                ..Default::default()
            };
        }
        cpu
    }

    /// Closes the cpu's current run interval at `ts`.
    fn accrue(&mut self, c: u32, ts: u64) {
        let (since, running) = {
            let cpu = self.cpu(c);
            (cpu.since, cpu.running)
        };
        let d = self.clip(since, ts);
        if running > 0 {
            self.thread(running).cpu_ns += d;
        }
        let cpu = self.cpu(c);
        match running {
            UNKNOWN => cpu.unknown += d,
            0 => cpu.idle += d,
            _ => cpu.busy += d,
        }
        cpu.since = ts;
    }

    /// The kernel switched cpu `c` to `pid` without a record (the switch
    /// out of it at `ts` names it): `pid` is taken to have run from its
    /// wakeup (on an idle cpu a wakeup runs within microseconds); with no
    /// wakeup since the last switch, who ran when is unknown.
    fn unrecorded_switch(&mut self, c: u32, pid: i32, ts: u64) {
        let since = self.cpu(c).since;
        let woke = match pid {
            0 => 0,
            _ => self.thread(pid).waking,
        };
        if woke != 0 && (since..=ts).contains(&woke) {
            self.accrue(c, woke);
            self.cpu(c).running = pid;
        } else {
            self.cpu(c).running = UNKNOWN;
        }
    }

    fn set_freq(&mut self, c: u32, ts: u64, khz: u64) {
        let since = self.cpu(c).freq_since;
        let d = self.clip(since, ts);
        let cpu = self.cpu(c);
        if cpu.freq != 0 && d > 0 {
            match cpu.residency.iter_mut().find(|r| r.0 == cpu.freq) {
                Some(r) => r.1 += d,
                None => cpu.residency.push((cpu.freq, d)),
            }
        }
        cpu.freq = khz;
        cpu.freq_since = ts;
    }

    pub fn feed(&mut self, r: &Rec) {
        let ts = r.ts;
        if let Ev::Comm(_) = r.ev {
            return;
        }
        self.start.get_or_insert(ts);
        self.end = self.end.max(ts);
        if r.cpu == NO_CPU {
            return;
        }
        let inside = self.inside(ts);
        let known = self.cpu(r.cpu).running != UNKNOWN;
        if !known && r.pid >= 0 && !matches!(r.ev, Ev::Switch { .. }) {
            self.cpu(r.cpu).running = r.pid;
        }
        let id = match &r.ev {
            Ev::Switch {
                prev_pid, next_pid, ..
            } => {
                let running = self.cpu(r.cpu).running;
                if !known && *prev_pid >= 0 {
                    self.cpu(r.cpu).running = *prev_pid;
                } else if *prev_pid >= 0 && *prev_pid != running {
                    self.unrecorded_switch(r.cpu, *prev_pid, ts);
                }
                self.accrue(r.cpu, ts);
                let prev = self.cpu(r.cpu).running;
                if prev > 0 {
                    self.thread(prev).waking = 0;
                }
                // A switch the kernel never recorded put `prev_pid` on
                // this cpu (traced_probes writes the next one in full):
                // its wakeup was served at a time the trace does not
                // have. Forget it, or its next switch in would count the
                // whole gap as latency.
                if *prev_pid > 0 && *prev_pid != prev {
                    self.thread(*prev_pid).waking = 0;
                }
                self.cpu(r.cpu).running = *next_pid;
                if *next_pid > 0 {
                    let t = self.thread(*next_pid);
                    let waking = std::mem::take(&mut t.waking);
                    if inside {
                        t.switches += 1;
                    }
                    if waking != 0 && inside {
                        let l = ts.saturating_sub(waking);
                        t.lat_n += 1;
                        t.lat_sum += l;
                        t.lat_max = t.lat_max.max(l);
                        self.latency.add(l);
                    }
                }
                SCHED_SWITCH
            }
            Ev::Waking { pid, wakeup, .. } => {
                let t = self.thread(*pid);
                if inside {
                    t.wakeups += 1;
                }
                if t.waking == 0 {
                    t.waking = ts;
                }
                if *wakeup {
                    SCHED_WAKEUP
                } else {
                    SCHED_WAKING
                }
            }
            Ev::Print(buf) => {
                self.atrace(r.pid, ts, buf);
                ftrace_event::PRINT
            }
            Ev::Other { id, raw } => {
                let cpu = varint_field(raw, 2) as u32;
                if *id == CPU_FREQUENCY && cpu < MAX_CPUS {
                    self.set_freq(cpu, ts, varint_field(raw, 1));
                }
                *id
            }
            Ev::Track(..) | Ev::Comm(_) => return,
        };
        if inside {
            self.events += 1;
            let s = slot(id);
            if self.counts.len() <= s {
                self.counts.resize(s + 1, Vec::new());
            }
            let v = &mut self.counts[s];
            let c = r.cpu as usize;
            if v.len() <= c {
                v.resize(c + 1, 0);
            }
            v[c] += 1;
        }
    }

    /// Closes every open interval at the last event.
    pub fn finish(&mut self) {
        let end = self.end;
        for c in 0..self.cpus.len() {
            if self.cpus[c].seen {
                self.accrue(c as u32, end);
                let f = self.cpus[c].freq;
                self.set_freq(c as u32, end, f);
            }
        }
    }

    fn slice_done(&mut self, name: &str, start: u64, end: u64) {
        if end < start {
            // Time went backwards between the begin and the end (events
            // out of order past the sorting window, or concatenated
            // traces): no duration to give.
            self.atrace_unmatched += 1;
            return;
        }
        if !(self.inside(start) && self.inside(end)) {
            return;
        }
        if let Some(a) = named(&mut self.slices, name, &mut self.atrace_dropped) {
            a.count += 1;
            a.total += end - start;
            a.max = a.max.max(end - start);
        }
    }

    /// `B|pid|name`, `E|pid`, `S|pid|name|cookie`, `F|pid|name|cookie`,
    /// `C|pid|name|value`; anything else is a plain print.
    fn atrace(&mut self, tid: i32, ts: u64, buf: &str) {
        let buf = buf.trim_end_matches(['\n', '\0']);
        let mut p = buf.splitn(4, '|');
        let (kind, _pid, name, rest) = (p.next(), p.next(), p.next(), p.next());
        match (kind, name) {
            (Some("B"), Some(name)) => {
                let s = &mut self.thread(tid).stack;
                if s.len() < MAX_DEPTH {
                    s.push((name.to_owned(), ts));
                } else {
                    self.atrace_dropped += 1;
                }
            }
            (Some("E"), _) => match self.thread(tid).stack.pop() {
                Some((name, start)) => self.slice_done(&name, start, ts),
                None => self.atrace_unmatched += 1,
            },
            (Some("S"), Some(name)) => {
                let key = format!("{name}\0{}", rest.unwrap_or(""));
                if let Some(a) = named(&mut self.open_async, &key, &mut self.atrace_dropped) {
                    a.total = ts;
                }
            }
            (Some("F"), Some(name)) => {
                let key = format!("{name}\0{}", rest.unwrap_or(""));
                match self.open_async.remove(&key) {
                    Some(a) => self.slice_done(name, a.total, ts),
                    None => self.atrace_unmatched += 1,
                }
            }
            (Some("C"), Some(name)) => {
                let v = rest
                    .and_then(|r| r.split('|').next())
                    .and_then(|v| {
                        let v = v.trim();
                        let x = parse_decimal(v.trim_start_matches('-'))?;
                        Some(if v.starts_with('-') { -x } else { x })
                    })
                    .filter(|v: &f64| v.is_finite())
                    .unwrap_or(0.0);
                if !self.inside(ts) {
                    return;
                }
                if let Some(c) = named(&mut self.counters, name, &mut self.atrace_dropped) {
                    if c.count == 0 {
                        (c.min_v, c.max_v) = (v, v);
                    }
                    c.count += 1;
                    c.min_v = c.min_v.min(v);
                    c.max_v = c.max_v.max(v);
                    c.last = v;
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_event_id_has_a_bounded_slot() {
        let top = ID_SLOTS as usize + MAX_GENERIC_NAMES;
        for id in [
            0,
            5,
            ID_SLOTS,
            GENERIC_BASE,
            GENERIC_BASE + 3,
            GENERIC_BASE + 5000,
            u32::MAX,
        ] {
            assert!(slot(id) < top, "{id}");
        }
        assert_eq!(slot(GENERIC_BASE + 3), ID_SLOTS as usize + 3);
    }

    fn rec(ts: u64, cpu: u32, ev: Ev) -> Rec {
        Rec {
            ts,
            cpu,
            pid: -1,
            ev,
        }
    }

    fn switch(prev: i32, next: i32) -> Ev {
        Ev::Switch {
            prev_pid: prev,
            prev_state: 0,
            next_pid: next,
            next_prio: 120,
        }
    }

    #[test]
    fn cpu_time_latency_and_slices() {
        let mut a = Analysis::new(0, u64::MAX);
        a.feed(&rec(100, 0, switch(0, 7)));
        let wake = Ev::Waking {
            pid: 8,
            target_cpu: 0,
            prio: 120,
            wakeup: false,
        };
        a.feed(&rec(150, 1, wake));
        a.feed(&Rec {
            ts: 160,
            cpu: 0,
            pid: 7,
            ev: Ev::Print("B|7|work\n".into()),
        });
        a.feed(&Rec {
            ts: 190,
            cpu: 0,
            pid: 7,
            ev: Ev::Print("E|7\n".into()),
        });
        a.feed(&rec(200, 0, switch(7, 8)));
        a.feed(&rec(400, 0, switch(8, 0)));
        a.feed(&rec(500, 0, switch(0, 7)));
        a.finish();
        assert_eq!(a.threads[&7].cpu_ns, 100);
        assert_eq!(a.threads[&8].cpu_ns, 200);
        assert_eq!(a.threads[&8].lat_max, 50);
        let c = &a.cpus[0];
        assert_eq!((c.busy, c.idle, c.unknown), (300, 100, 0));
        assert_eq!(a.slices["work"].max, 30);
        assert_eq!(a.latency.count(), 1);
        assert!((47..=53).contains(&a.latency.quantile(0.5)));
        assert_eq!(a.counts[slot(SCHED_SWITCH)], vec![4]);
        assert_eq!(slot_id(slot(GENERIC_BASE + 3)), GENERIC_BASE + 3);
    }

    /// The kernel left the switch to 8 unrecorded; the next switch, out
    /// of 8, names it: 8's wakeup was served then, its next one is
    /// measured from its own waking.
    #[test]
    fn an_unrecorded_switch_does_not_stretch_the_next_latency() {
        let mut a = Analysis::new(0, u64::MAX);
        let wake = |ts| Rec {
            ts,
            cpu: 1,
            pid: 5,
            ev: Ev::Waking {
                pid: 8,
                target_cpu: 0,
                prio: 120,
                wakeup: false,
            },
        };
        a.feed(&rec(100, 0, switch(7, 0)));
        a.feed(&wake(200));
        a.feed(&rec(300, 0, switch(8, 0)));
        a.feed(&wake(10_000));
        a.feed(&rec(10_040, 0, switch(0, 8)));
        a.feed(&rec(10_100, 0, switch(9, 0)));
        a.feed(&rec(10_200, 0, switch(0, 7)));
        a.finish();
        assert_eq!(a.threads[&8].lat_max, 40);
        assert_eq!(a.threads[&8].lat_n, 1);
        // 8 ran from its wakeup at 200 to 300, idle before; 9 came with
        // no wakeup: who ran over 10_040..10_100 (8, then 9) is unknown.
        assert_eq!(a.threads[&8].cpu_ns, 100);
        let c = &a.cpus[0];
        assert_eq!((c.busy, c.idle, c.unknown), (100, 100 + 9_740 + 100, 60));
    }

    /// An end earlier than its begin (concatenated traces, events late
    /// past the sorting window) is counted, not a huge duration.
    #[test]
    fn a_slice_ending_before_it_began_is_counted() {
        let mut a = Analysis::new(0, u64::MAX);
        let print = |ts, s: &str| Rec {
            ts,
            cpu: 0,
            pid: 7,
            ev: Ev::Print(s.into()),
        };
        a.feed(&print(500, "B|7|late"));
        a.feed(&print(100, "E|7"));
        a.feed(&print(600, "S|7|a|1"));
        a.feed(&print(200, "F|7|a|1"));
        a.finish();
        assert!(a.slices.is_empty(), "{:?}", a.slices);
        assert_eq!(a.atrace_unmatched, 2);
    }

    /// `cpu_frequency` (state = kHz, cpu_id) as the bundle carries it.
    fn freq(khz: u8, cpu: u8) -> Ev {
        Ev::Other {
            id: CPU_FREQUENCY,
            raw: vec![0x08, khz, 0x10, cpu].into(),
        }
    }

    #[test]
    fn frequency_residency_and_window() {
        let mut a = Analysis::new(150, 1000);
        a.feed(&rec(100, 0, freq(100, 1)));
        a.feed(&rec(300, 0, freq(50, 1)));
        a.feed(&rec(600, 0, freq(100, 1)));
        a.feed(&rec(700, 1, switch(0, 9)));
        a.finish();
        // cpu 1 ran at 100 kHz over [150, 300) and [600, 700], 50 over [300, 600).
        assert_eq!(a.cpus[1].residency, vec![(100, 250), (50, 300)]);
        assert!(a.cpus[0].residency.is_empty());
        assert_eq!(a.events, 3, "the event at 100 is outside the window");
    }
}

//! Puts every timestamp on the trace clock, as trace_processor does.
//!
//! ClockSnapshot packets pair clocks read at the same moment. Snapshots of
//! the same set of clocks form one time series; a conversion walks the
//! shortest chain of series from the source clock to the trace clock
//! (BOOTTIME unless the trace says otherwise) and, on each hop, uses the
//! latest snapshot at or before the timestamp (the first one before all of
//! them). Clock ids 64..127 belong to the packet sequence that declared
//! them; their values may be deltas (`is_incremental`) and in units of
//! `unit_multiplier_ns`. Snapshots are used in file order, so a timestamp
//! before the first snapshot that reaches its clock has no path: counted,
//! not guessed.

use crate::protozero::decode::{read_varint, FieldIter};

pub const BOOTTIME: u64 = 6;
pub const MONOTONIC_RAW: u64 = 5;
/// Key of the per-sequence ftrace clock (`global`/`local`), out of the
/// 64..127 range a producer may use.
const FTRACE_SEQ_CLOCK: u64 = 128;
/// Distinct clock sets kept (a trace has a handful), and snapshots per set
/// (one per read pass or flush).
const MAX_SETS: usize = 64;
const MAX_ROWS: usize = 1 << 16;
const MAX_HOPS: usize = 4;
/// Clocks with a unit or delta state (declared by snapshots), and source
/// clocks whose conversion path (or lack of one) is remembered.
const MAX_DOMAINS: usize = 1024;
const MAX_PATHS: usize = 256;

/// One hop of a conversion: (clock set, column of the source clock,
/// column of the next clock).
type Path = Vec<(usize, usize, usize)>;

/// A clock's unit and delta state.
#[derive(Debug)]
struct Domain {
    key: u64,
    unit: i64,
    incremental: bool,
    last_ns: i64,
}

#[derive(Debug, Default)]
pub struct Clocks {
    /// The trace clock (a builtin id).
    pub trace_clock: u64,
    /// Clock sets (keys sorted) and their snapshots' timestamps (ns).
    sets: Vec<(Vec<u64>, Vec<Vec<i64>>)>,
    domains: Vec<Domain>,
    /// Every clock of `sets`, sorted: a clock outside them has no path.
    known: Vec<u64>,
    /// Last path found per source clock: (set, from column, to column);
    /// `None`: none with the sets known then.
    paths: Vec<(u64, Option<Path>)>,
    /// Timestamps with no path to the trace clock.
    pub failed: u64,
    pub over_limit: u64,
}

/// The key of clock `id` as seen by sequence `seq`.
pub fn key(seq: u32, id: u64) -> u64 {
    if (64..=FTRACE_SEQ_CLOCK).contains(&id) {
        (seq as u64) << 32 | id
    } else {
        id
    }
}

fn varint(v: &[u8]) -> u64 {
    read_varint(v).map_or(0, |x| x.0)
}

impl Clocks {
    fn trace_key(&self) -> u64 {
        if self.trace_clock == 0 {
            BOOTTIME
        } else {
            self.trace_clock
        }
    }

    /// The clock the trace's timestamps are put on (0: BOOTTIME).
    pub fn set_trace_clock(&mut self, c: u64) {
        if c != self.trace_clock {
            self.trace_clock = c;
            self.paths.clear();
        }
    }

    /// The state of a clock a snapshot declares; `None` (counted) once
    /// `MAX_DOMAINS` clocks are known, so a hostile trace cannot make every
    /// lookup a long scan.
    fn domain(&mut self, key: u64) -> Option<&mut Domain> {
        let i = match self.domains.iter().position(|d| d.key == key) {
            Some(i) => i,
            None if self.domains.len() < MAX_DOMAINS => {
                self.domains.push(Domain {
                    key,
                    unit: 1,
                    incremental: false,
                    last_ns: 0,
                });
                self.domains.len() - 1
            }
            None => {
                self.over_limit += 1;
                return None;
            }
        };
        Some(&mut self.domains[i])
    }

    /// A `ClockSnapshot` of sequence `seq`.
    pub fn snapshot(&mut self, seq: u32, b: &[u8]) {
        let mut row = Vec::new();
        for f in FieldIter::new(b) {
            match f.number {
                1 => {
                    let (mut id, mut ts, mut inc, mut unit) = (0, 0, false, 1);
                    for g in FieldIter::new(f.value) {
                        match g.number {
                            1 => id = varint(g.value),
                            2 => ts = varint(g.value) as i64,
                            3 => inc = varint(g.value) != 0,
                            4 => unit = (varint(g.value) as i64).max(1),
                            _ => {}
                        }
                    }
                    let k = key(seq, id);
                    let Some(d) = self.domain(k) else {
                        continue;
                    };
                    let ns = ts.wrapping_mul(unit);
                    (d.unit, d.incremental) = (unit, inc);
                    if inc {
                        d.last_ns = ns;
                    }
                    row.push((k, ns));
                }
                2 => self.set_trace_clock(varint(f.value)),
                _ => {}
            }
        }
        self.add(row);
    }

    /// Adds one snapshot: clocks read at the same moment (ns).
    pub fn add(&mut self, mut row: Vec<(u64, i64)>) {
        // Keys in order, each once (an insertion sort: a snapshot has a
        // handful of clocks, and a sort instantiation costs binary size).
        for i in 1..row.len() {
            let mut j = i;
            while j > 0 && row[j - 1].0 > row[j].0 {
                row.swap(j - 1, j);
                j -= 1;
            }
        }
        row.dedup_by_key(|c| c.0);
        if row.len() < 2 {
            return;
        }
        let keys: Vec<u64> = row.iter().map(|c| c.0).collect();
        let ts: Vec<i64> = row.iter().map(|c| c.1).collect();
        let at = match self.sets.iter().position(|s| s.0 == keys) {
            Some(i) => i,
            None if self.sets.len() < MAX_SETS => {
                for k in &keys {
                    if let Err(i) = self.known.binary_search(k) {
                        self.known.insert(i, *k);
                    }
                }
                self.sets.push((keys, Vec::new()));
                self.paths.clear();
                self.sets.len() - 1
            }
            None => {
                self.over_limit += 1;
                return;
            }
        };
        // Bundles of one read pass repeat its snapshot. A full series keeps
        // its latest snapshot current instead of growing (the stream's
        // timestamps only move forward, so older ones are rarely needed).
        let rows = &mut self.sets[at].1;
        let full = rows.len() >= MAX_ROWS;
        match rows.last_mut() {
            Some(last) if *last == ts => {}
            Some(last) if full => *last = ts,
            _ => rows.push(ts),
        }
    }

    /// Shortest chain of clock sets from `src` to the trace clock.
    /// Remembered, found or not (until the sets change), so timestamps
    /// of an unreachable clock do not each search again.
    fn path(&mut self, src: u64) -> Option<Path> {
        self.known.binary_search(&src).ok()?;
        if let Some(p) = self.paths.iter().find(|p| p.0 == src) {
            return p.1.clone();
        }
        let found = self.search(src);
        if self.paths.len() >= MAX_PATHS {
            self.paths.clear();
        }
        self.paths.push((src, found.clone()));
        found
    }

    fn search(&self, src: u64) -> Option<Path> {
        let dst = self.trace_key();
        let mut frontier = vec![(src, Vec::new())];
        let mut seen = vec![src];
        for _ in 0..MAX_HOPS {
            let mut next = Vec::new();
            for (clock, path) in &frontier {
                for (si, (keys, _)) in self.sets.iter().enumerate() {
                    let Some(from) = keys.iter().position(|k| k == clock) else {
                        continue;
                    };
                    for (to, k) in keys.iter().enumerate() {
                        if seen.contains(k) {
                            continue;
                        }
                        let mut p: Path = path.clone();
                        p.push((si, from, to));
                        if *k == dst {
                            return Some(p);
                        }
                        seen.push(*k);
                        next.push((*k, p));
                    }
                }
            }
            frontier = next;
        }
        None
    }

    /// `ts` of clock `key` on the trace clock; `None` (counted) without a
    /// path.
    pub fn convert(&mut self, key: u64, ts: u64) -> Option<u64> {
        // A clock no snapshot declared has no state to keep (nor a path,
        // unless it is the trace clock).
        let mut ns = ts as i64;
        if let Some(d) = self.domains.iter_mut().find(|d| d.key == key) {
            ns = ns.wrapping_mul(d.unit);
            if d.incremental {
                d.last_ns = d.last_ns.wrapping_add(ns);
                ns = d.last_ns;
            }
        }
        if key == self.trace_key() {
            return Some(ns as u64);
        }
        let Some(path) = self.path(key) else {
            self.failed += 1;
            return None;
        };
        for (si, from, to) in path {
            let rows = &self.sets[si].1;
            let i = rows.partition_point(|r| r[from] <= ns).saturating_sub(1);
            ns = rows[i][to].wrapping_add(ns.wrapping_sub(rows[i][from]));
        }
        Some(ns as u64)
    }

    /// The key of an ftrace bundle's clock (`FtraceClock`), after taking
    /// its per-bundle snapshot (ftrace clock, BOOTTIME) if it has one.
    pub fn ftrace(&mut self, seq: u32, clock: u64, snap: Option<(i64, i64)>) -> u64 {
        match clock {
            0 => BOOTTIME,
            4 => MONOTONIC_RAW,
            _ => {
                let k = key(seq, FTRACE_SEQ_CLOCK);
                if let Some((ftrace_ts, boot_ts)) = snap {
                    self.add(vec![(k, ftrace_ts), (BOOTTIME, boot_ts)]);
                }
                k
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hops through two sets, picks the latest snapshot at or before the
    /// timestamp, and scales and accumulates a sequence's incremental clock.
    #[test]
    fn converts_like_trace_processor() {
        let mut c = Clocks::default();
        c.add(vec![(BOOTTIME, 1000), (3, 500)]);
        c.add(vec![(BOOTTIME, 2000), (3, 1400)]);
        c.add(vec![(3, 600), (key(7, 64), 10)]);
        assert_eq!(c.convert(BOOTTIME, 5), Some(5));
        assert_eq!(c.convert(3, 450), Some(950), "before all: the first");
        assert_eq!(c.convert(3, 1500), Some(2100));
        // Clock 64 of sequence 7 is at 10 when MONOTONIC is at 600.
        assert_eq!(c.convert(key(7, 64), 20), Some(1110));
        assert_eq!(c.convert(key(8, 64), 20), None);
        assert_eq!(c.failed, 1);
        // An incremental clock in microseconds.
        c.domain(key(7, 65)).unwrap().incremental = true;
        c.domain(key(7, 65)).unwrap().unit = 1000;
        c.add(vec![(key(7, 65), 0), (BOOTTIME, 3000)]);
        assert_eq!(c.convert(key(7, 65), 2), Some(5000));
        assert_eq!(c.convert(key(7, 65), 1), Some(6000));
        // Another trace clock (ClockSnapshot.primary_trace_clock).
        c.set_trace_clock(3);
        assert_eq!(c.convert(BOOTTIME, 2100), Some(1500));
        assert_eq!(c.convert(3, 7), Some(7));
    }

    /// Timestamps on clocks no snapshot declared leave no state behind, and
    /// a clock with no path is searched for once.
    #[test]
    fn unknown_clocks_stay_bounded() {
        let mut c = Clocks::default();
        c.add(vec![(BOOTTIME, 1000), (3, 500)]);
        for id in 0..20_000u64 {
            assert_eq!(c.convert(key(id as u32, 64 + id % 64), 1), None);
            assert_eq!(c.convert(1 << 40 | id, 1), None);
        }
        assert_eq!(c.failed, 40_000);
        assert!(c.domains.is_empty());
        assert!(c.paths.len() <= MAX_PATHS);
        for id in 0..2 * MAX_DOMAINS as u64 {
            c.add(vec![(BOOTTIME, 1), (1000 + id, 2)]);
            let _ = c.domain(1000 + id);
        }
        assert_eq!(c.domains.len(), MAX_DOMAINS);
        assert_eq!(c.convert(3, 600), Some(1100));
    }
}

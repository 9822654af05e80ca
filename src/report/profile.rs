//! The profile of a trace's `PerfSample` packets (traced_perf's or
//! upstream's): each sample's interned callstack resolved to function
//! names as it comes (interning is per packet sequence and may be
//! cleared), then counted per process and call path. Bounded: at most
//! [`MAX_STACKS`] distinct (process, path) pairs and [`MAX_NAMES`] names;
//! samples past them are counted as such.

use std::collections::HashMap;
use std::io::Read;

use crate::protozero::decode::{read_varint, FieldIter};

use super::reader::PacketReader;

const MAX_STACKS: usize = 1 << 20;
const MAX_NAMES: usize = 1 << 20;
/// Interned entries kept per sequence (a hostile trace cannot grow us).
const MAX_INTERNED: usize = 1 << 22;

// TracePacket fields.
const TRUSTED_SEQUENCE_ID: u32 = 10;
const INTERNED_DATA: u32 = 12;
const SEQUENCE_FLAGS: u32 = 13;
const INCREMENTAL_STATE_CLEARED: u32 = 41;
const PROCESS_TREE: u32 = 2;
const PERF_SAMPLE: u32 = 66;
const COMPRESSED_PACKETS: u32 = 50;
const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
const MAX_INFLATED: usize = 64 << 20;

/// Which samples count.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub pids: Vec<u32>,
    /// Process names (argv[0] without its directory, from the trace's
    /// process tree).
    pub comms: Vec<String>,
}

#[derive(Default)]
struct Interned {
    names: HashMap<u64, u32>,
    /// frame iid → (function name, mapping iid, rel_pc).
    frames: HashMap<u64, (Option<u64>, u64, u64)>,
    /// mapping iid → the last path component's name id.
    mappings: HashMap<u64, u32>,
    paths: HashMap<u64, u32>,
    callstacks: HashMap<u64, Vec<u64>>,
}

impl Interned {
    fn len(&self) -> usize {
        self.names.len()
            + self.frames.len()
            + self.mappings.len()
            + self.paths.len()
            + self.callstacks.len()
    }
}

#[derive(Default)]
pub struct Profile {
    names: Vec<String>,
    name_ids: HashMap<String, u32>,
    seqs: HashMap<u64, Interned>,
    /// (pid, path of name ids, root first) → samples.
    stacks: HashMap<(u32, Vec<u32>), u64>,
    pid_names: HashMap<u32, String>,
    /// PerfSample packets of samples (not loss records).
    pub samples: u64,
    /// Of those, without a callstack (skipped, or counters only).
    pub without_stack: u64,
    /// With PerfSample.unwind_error (their stacks are cut short).
    pub unwind_errors: u64,
    /// With PerfSample.sample_skipped_reason.
    pub skipped: u64,
    /// PerfSample.kernel_records_lost summed.
    pub kernel_lost: u64,
    /// Samples not counted per path (past MAX_STACKS or MAX_NAMES).
    pub over_bounds: u64,
    pub malformed: u64,
}

fn varint(v: &[u8]) -> u64 {
    read_varint(v).map_or(0, |(x, _)| x)
}

/// The varints of a repeated field, packed or not.
fn push_varints(wire_type: u8, value: &[u8], out: &mut Vec<u64>) {
    if wire_type != 2 {
        out.push(varint(value));
        return;
    }
    let mut rest = value;
    while let Some((x, n)) = read_varint(rest) {
        out.push(x);
        rest = &rest[n..];
    }
}

impl Profile {
    fn name_id(&mut self, name: &str) -> Option<u32> {
        if let Some(&id) = self.name_ids.get(name) {
            return Some(id);
        }
        if self.names.len() >= MAX_NAMES {
            return None;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_string());
        self.name_ids.insert(name.to_string(), id);
        Some(id)
    }

    /// Reads a whole trace.
    pub fn scan<R: Read>(src: R) -> (Profile, Option<String>) {
        let mut p = Profile::default();
        let mut rd = PacketReader::new(src);
        while let Some(pk) = rd.next_packet() {
            let z = FieldIter::new(pk).find(|f| f.number == COMPRESSED_PACKETS && f.wire_type == 2);
            match z {
                None => p.packet(pk),
                Some(z) => {
                    match miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(
                        z.value,
                        MAX_INFLATED,
                    ) {
                        Ok(raw) => {
                            for f in FieldIter::new(&raw).filter(|f| f.number == 1) {
                                p.packet(f.value);
                            }
                        }
                        Err(_) => p.malformed += 1,
                    }
                }
            }
        }
        (p, rd.error.take())
    }

    /// One packet: its interned data, then its sample.
    pub fn packet(&mut self, packet_untrusted: &[u8]) {
        let mut seq = 0;
        let mut cleared = false;
        let mut interned = None;
        let mut sample = None;
        let mut tree = None;
        let mut it = FieldIter::new(packet_untrusted);
        for f in it.by_ref() {
            match (f.number, f.wire_type) {
                (TRUSTED_SEQUENCE_ID, 0) => seq = varint(f.value),
                (SEQUENCE_FLAGS, 0) => {
                    cleared |= varint(f.value) & SEQ_INCREMENTAL_STATE_CLEARED != 0
                }
                (INCREMENTAL_STATE_CLEARED, 0) => cleared |= varint(f.value) != 0,
                (INTERNED_DATA, 2) => interned = Some(f.value),
                (PERF_SAMPLE, 2) => sample = Some(f.value),
                (PROCESS_TREE, 2) => tree = Some(f.value),
                _ => {}
            }
        }
        if it.error {
            self.malformed += 1;
            return;
        }
        if cleared {
            self.seqs.insert(seq, Interned::default());
        }
        if let Some(d) = interned {
            self.intern(seq, d);
        }
        if let Some(t) = tree {
            self.process_tree(t);
        }
        if let Some(s) = sample {
            self.sample(seq, s);
        }
    }

    fn process_tree(&mut self, tree: &[u8]) {
        for p in FieldIter::new(tree).filter(|f| f.number == 1 && f.wire_type == 2) {
            let mut pid = None;
            let mut argv0 = None;
            for f in FieldIter::new(p.value) {
                match (f.number, f.wire_type) {
                    (1, 0) => pid = Some(varint(f.value) as u32),
                    (3, 2) if argv0.is_none() => argv0 = Some(f.value),
                    _ => {}
                }
            }
            if let (Some(pid), Some(a)) = (pid, argv0) {
                if self.pid_names.len() < MAX_NAMES {
                    let a = String::from_utf8_lossy(a);
                    let base = a.rsplit('/').next().unwrap_or_default();
                    self.pid_names.insert(pid, base.to_string());
                }
            }
        }
    }

    fn intern(&mut self, seq: u64, d: &[u8]) {
        let mut strings: Vec<(u32, u64, String)> = Vec::new();
        let mut frames = Vec::new();
        let mut mappings = Vec::new();
        let mut stacks = Vec::new();
        for f in FieldIter::new(d).filter(|f| f.wire_type == 2) {
            match f.number {
                // function_names, mapping_paths: InternedString.
                5 | 17 => {
                    let (mut iid, mut s) = (0, String::new());
                    for g in FieldIter::new(f.value) {
                        match (g.number, g.wire_type) {
                            (1, 0) => iid = varint(g.value),
                            (2, 2) => s = String::from_utf8_lossy(g.value).into_owned(),
                            _ => {}
                        }
                    }
                    strings.push((f.number, iid, s));
                }
                6 => {
                    let (mut iid, mut name, mut map, mut pc) = (0, None, 0, 0);
                    for g in FieldIter::new(f.value).filter(|g| g.wire_type == 0) {
                        match g.number {
                            1 => iid = varint(g.value),
                            2 => name = Some(varint(g.value)),
                            3 => map = varint(g.value),
                            4 => pc = varint(g.value),
                            _ => {}
                        }
                    }
                    frames.push((iid, (name, map, pc)));
                }
                19 => {
                    let (mut iid, mut paths) = (0, Vec::new());
                    for g in FieldIter::new(f.value) {
                        match g.number {
                            1 => iid = varint(g.value),
                            7 => push_varints(g.wire_type, g.value, &mut paths),
                            _ => {}
                        }
                    }
                    mappings.push((iid, paths.last().copied()));
                }
                7 => {
                    let (mut iid, mut ids) = (0, Vec::new());
                    for g in FieldIter::new(f.value) {
                        match g.number {
                            1 => iid = varint(g.value),
                            2 => push_varints(g.wire_type, g.value, &mut ids),
                            _ => {}
                        }
                    }
                    stacks.push((iid, ids));
                }
                _ => {}
            }
        }
        for (field, iid, s) in strings {
            let Some(id) = self.name_id(&s) else { continue };
            let st = self.seqs.entry(seq).or_default();
            if st.len() >= MAX_INTERNED {
                return;
            }
            if field == 5 {
                st.names.insert(iid, id);
            } else {
                st.paths.insert(iid, id);
            }
        }
        let st = self.seqs.entry(seq).or_default();
        for (iid, f) in frames {
            if st.len() < MAX_INTERNED {
                st.frames.insert(iid, f);
            }
        }
        for (iid, path) in mappings {
            if let Some(name) = path.and_then(|p| st.paths.get(&p)) {
                if st.len() < MAX_INTERNED {
                    st.mappings.insert(iid, *name);
                }
            }
        }
        for (iid, ids) in stacks {
            if st.len() < MAX_INTERNED {
                st.callstacks.insert(iid, ids);
            }
        }
    }

    fn sample(&mut self, seq: u64, s: &[u8]) {
        let (mut pid, mut callstack) = (0u32, None);
        let (mut lost, mut unwind_error, mut skipped) = (None, false, false);
        for f in FieldIter::new(s).filter(|f| f.wire_type == 0) {
            match f.number {
                2 => pid = varint(f.value) as u32,
                4 => callstack = Some(varint(f.value)),
                16 => unwind_error = true,
                17 => lost = Some(varint(f.value)),
                18 => skipped = true,
                _ => {}
            }
        }
        if let Some(n) = lost {
            self.kernel_lost = self.kernel_lost.saturating_add(n);
            return;
        }
        self.samples += 1;
        self.unwind_errors += unwind_error as u64;
        self.skipped += skipped as u64;
        let Some(iid) = callstack else {
            self.without_stack += 1;
            return;
        };
        let mut path = Vec::new();
        let Some(st) = self.seqs.get(&seq) else {
            self.malformed += 1;
            return;
        };
        let Some(frames) = st.callstacks.get(&iid) else {
            self.malformed += 1;
            return;
        };
        let mut labels = Vec::with_capacity(frames.len());
        for fid in frames {
            let label = match st.frames.get(fid) {
                Some((Some(n), _, _)) if st.names.contains_key(n) => Ok(st.names[n]),
                Some((_, map, pc)) => match st.mappings.get(map) {
                    Some(m) => Err(format!("{}+{pc:#x}", self.names[*m as usize])),
                    None => Err(format!("?+{pc:#x}")),
                },
                None => Err("?".to_string()),
            };
            labels.push(label);
        }
        for l in labels {
            let id = match l {
                Ok(id) => Some(id),
                Err(s) => self.name_id(&s),
            };
            let Some(id) = id else {
                self.over_bounds += 1;
                return;
            };
            path.push(id);
        }
        let key = (pid, path);
        if let Some(n) = self.stacks.get_mut(&key) {
            *n += 1;
        } else if self.stacks.len() < MAX_STACKS {
            self.stacks.insert(key, 1);
        } else {
            self.over_bounds += 1;
        }
    }

    fn admits(&self, pid: u32, f: &Filter) -> bool {
        (f.pids.is_empty() || f.pids.contains(&pid))
            && (f.comms.is_empty()
                || self
                    .pid_names
                    .get(&pid)
                    .is_some_and(|n| f.comms.iter().any(|c| c == n)))
    }

    /// The tables for the samples `filter` admits.
    pub fn summary(&self, filter: &Filter, top: usize) -> Summary {
        let mut self_n: HashMap<u32, u64> = HashMap::new();
        let mut total_n: HashMap<u32, u64> = HashMap::new();
        let mut paths: Vec<(u64, &[u32])> = Vec::new();
        let mut pids: Vec<u32> = Vec::new();
        let mut n = 0u64;
        for ((pid, path), &c) in &self.stacks {
            if !self.admits(*pid, filter) {
                continue;
            }
            n += c;
            pids.push(*pid);
            if let Some(leaf) = path.last() {
                *self_n.entry(*leaf).or_default() += c;
            }
            let mut seen: Vec<u32> = path.clone();
            seen.sort_unstable();
            seen.dedup();
            for f in seen {
                *total_n.entry(f).or_default() += c;
            }
            paths.push((c, path));
        }
        pids.sort_unstable();
        pids.dedup();
        let rows = |m: HashMap<u32, u64>| {
            let mut v: Vec<(u64, String)> = m
                .into_iter()
                .map(|(id, c)| (c, self.names[id as usize].clone()))
                .collect();
            // Equal elements are equal values: unstable prints the same.
            v.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            v.truncate(top);
            v
        };
        // Paths of different processes with the same frames are one path.
        let mut merged: HashMap<&[u32], u64> = HashMap::new();
        for (c, p) in paths {
            *merged.entry(p).or_default() += c;
        }
        let mut heavy: Vec<(u64, Vec<String>)> = merged
            .into_iter()
            .map(|(p, c)| {
                (
                    c,
                    p.iter().map(|&i| self.names[i as usize].clone()).collect(),
                )
            })
            .collect();
        heavy.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        heavy.truncate(top);
        Summary {
            samples: n,
            processes: pids.len(),
            by_self: rows(self_n),
            by_total: rows(total_n),
            paths: heavy,
        }
    }
}

/// One view of a profile: counts with their samples.
#[derive(Debug, Default)]
pub struct Summary {
    /// Samples with a callstack the filter admits.
    pub samples: u64,
    pub processes: usize,
    pub by_self: Vec<(u64, String)>,
    pub by_total: Vec<(u64, String)>,
    /// Function names, root first.
    pub paths: Vec<(u64, Vec<String>)>,
}

fn pct(n: u64, of: u64) -> f64 {
    100.0 * n as f64 / of.max(1) as f64
}

/// The profile section of `tracebox report`.
pub fn text(p: &Profile, filter: &Filter, top: usize) -> String {
    use std::fmt::Write;
    let s = p.summary(filter, top);
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Profile: {} samples with call stacks in {} processes ({} PerfSample packets in the trace)",
        s.samples, s.processes, p.samples
    );
    if !filter.pids.is_empty() || !filter.comms.is_empty() {
        let mut what: Vec<String> = filter.pids.iter().map(|p| format!("pid {p}")).collect();
        what.extend(filter.comms.iter().map(|c| format!("comm {c}")));
        let _ = writeln!(o, "  only {}", what.join(", "));
    }
    let mut gaps = Vec::new();
    if p.unwind_errors > 0 {
        gaps.push(format!(
            "{} stacks cut short (PerfSample.unwind_error)",
            p.unwind_errors
        ));
    }
    if p.skipped > 0 {
        gaps.push(format!(
            "{} samples skipped (PerfSample.sample_skipped_reason)",
            p.skipped
        ));
    }
    if p.kernel_lost > 0 {
        gaps.push(format!(
            "LOST {} perf records in the kernel (PerfSample.kernel_records_lost)",
            p.kernel_lost
        ));
    }
    if p.over_bounds + p.malformed > 0 {
        gaps.push(format!(
            "{} samples not counted per path",
            p.over_bounds + p.malformed
        ));
    }
    if !gaps.is_empty() {
        let _ = writeln!(o, "  {}", gaps.join("; "));
    }
    let paths: Vec<(u64, String)> = s.paths.iter().map(|(c, p)| (*c, p.join(" > "))).collect();
    for (title, rows) in [
        ("Top functions by self samples", &s.by_self),
        ("Top functions by total samples", &s.by_total),
        ("Heaviest call paths (root > leaf)", &paths),
    ] {
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(o, "\n{title}:");
        for (c, name) in rows {
            let _ = writeln!(o, "  {:>6.2}% {:>8}  {name}", pct(*c, s.samples), c);
        }
    }
    o
}

/// The profile as a JSON object (`tracebox report --json`): the counts of
/// the text view, and each row with its samples and percent.
pub fn json(p: &Profile, filter: &Filter, top: usize) -> String {
    use super::output::js;
    use std::fmt::Write;
    let s = p.summary(filter, top);
    let list = |v: &[String]| v.iter().map(|x| js(x)).collect::<Vec<_>>().join(",");
    let mut o = String::new();
    let pids: Vec<String> = filter.pids.iter().map(u32::to_string).collect();
    let _ = write!(
        o,
        "{{\"samples\":{},\"processes\":{},\"perf_sample_packets\":{},\"only_pids\":[{}],\
         \"only_comms\":[{}],\"unwind_errors\":{},\"skipped\":{},\"kernel_records_lost\":{},\
         \"not_counted\":{}",
        s.samples,
        s.processes,
        p.samples,
        pids.join(","),
        list(&filter.comms),
        p.unwind_errors,
        p.skipped,
        p.kernel_lost,
        p.over_bounds + p.malformed
    );
    for (key, rows) in [("by_self", &s.by_self), ("by_total", &s.by_total)] {
        let rows: Vec<String> = rows
            .iter()
            .map(|(c, name)| {
                format!(
                    "{{\"name\":{},\"samples\":{c},\"percent\":{:.2}}}",
                    js(name),
                    pct(*c, s.samples)
                )
            })
            .collect();
        let _ = write!(o, ",\"{key}\":[{}]", rows.join(","));
    }
    let paths: Vec<String> = s
        .paths
        .iter()
        .map(|(c, path)| {
            format!(
                "{{\"frames\":[{}],\"samples\":{c},\"percent\":{:.2}}}",
                list(path),
                pct(*c, s.samples)
            )
        })
        .collect();
    let _ = write!(o, ",\"paths\":[{}]}}", paths.join(","));
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protozero::{begin_nested, end_nested, put_bytes, put_varint, VecStream};

    fn interned_string(s: &mut VecStream, field: u32, iid: u64, text: &str) {
        let n = begin_nested(s, field);
        put_varint(s, 1, iid);
        put_bytes(s, 2, text.as_bytes());
        end_nested(s, n);
    }

    /// A sequence with names main(1) > work(2) > a(3) | b(4): callstack 1
    /// main>work>a, 2 main>work>b; 3 samples of a, 1 of b, pid 7; one of pid
    /// 8 that the filter leaves out.
    fn trace() -> Vec<Vec<u8>> {
        let mut first = VecStream::new();
        put_varint(&mut first, TRUSTED_SEQUENCE_ID, 5);
        put_varint(&mut first, SEQUENCE_FLAGS, 1);
        let d = begin_nested(&mut first, INTERNED_DATA);
        for (iid, name) in [(1, "main"), (2, "work"), (3, "a"), (4, "b")] {
            interned_string(&mut first, 5, iid, name);
            let f = begin_nested(&mut first, 6);
            put_varint(&mut first, 1, iid);
            put_varint(&mut first, 2, iid);
            put_varint(&mut first, 3, 1);
            end_nested(&mut first, f);
        }
        for (iid, ids) in [(1u64, [1u64, 2, 3]), (2, [1, 2, 4])] {
            let c = begin_nested(&mut first, 7);
            put_varint(&mut first, 1, iid);
            for i in ids {
                put_varint(&mut first, 2, i);
            }
            end_nested(&mut first, c);
        }
        end_nested(&mut first, d);
        let mut packets = vec![first.into_bytes()];
        for (pid, stack) in [(7u64, 1u64), (7, 1), (7, 1), (7, 2), (8, 2)] {
            let mut p = VecStream::new();
            put_varint(&mut p, TRUSTED_SEQUENCE_ID, 5);
            let s = begin_nested(&mut p, PERF_SAMPLE);
            put_varint(&mut p, 2, pid);
            put_varint(&mut p, 4, stack);
            end_nested(&mut p, s);
            packets.push(p.into_bytes());
        }
        packets
    }

    #[test]
    fn self_total_and_paths_with_shares() {
        let mut p = Profile::default();
        for pk in trace() {
            p.packet(&pk);
        }
        let f = Filter {
            pids: vec![7],
            comms: vec![],
        };
        let s = p.summary(&f, 10);
        assert_eq!(s.samples, 4);
        assert_eq!(s.by_self, vec![(3, "a".into()), (1, "b".into())]);
        assert_eq!(s.by_total[0], (4, "main".into()));
        assert_eq!(
            s.paths[0],
            (3, vec!["main".into(), "work".into(), "a".into()])
        );
        let out = text(&p, &f, 10);
        assert!(out.contains(" 75.00%        3  a"), "{out}");
        assert!(out.contains("100.00%        4  main"), "{out}");
        assert_eq!(p.summary(&Filter::default(), 10).samples, 5);
        let j = json(&p, &f, 10);
        assert!(
            j.starts_with(
                "{\"samples\":4,\"processes\":1,\"perf_sample_packets\":5,\"only_pids\":[7],"
            ),
            "{j}"
        );
        assert!(
            j.contains("\"by_self\":[{\"name\":\"a\",\"samples\":3,\"percent\":75.00},"),
            "{j}"
        );
        assert!(
            j.contains(
                "\"paths\":[{\"frames\":[\"main\",\"work\",\"a\"],\"samples\":3,\"percent\":75.00}"
            ),
            "{j}"
        );
        assert!(j.ends_with("]}"), "{j}");
    }

    /// `--comm` matches argv[0] without its directory from the process
    /// tree, wherever the tree comes in the trace.
    #[test]
    fn comm_filter_uses_the_process_tree() {
        let mut p = Profile::default();
        for pk in trace() {
            p.packet(&pk);
        }
        let mut tree = VecStream::new();
        let t = begin_nested(&mut tree, PROCESS_TREE);
        for (pid, argv0) in [(7u64, "/usr/bin/myapp"), (8, "other")] {
            let proc_ = begin_nested(&mut tree, 1);
            put_varint(&mut tree, 1, pid);
            put_bytes(&mut tree, 3, argv0.as_bytes());
            put_bytes(&mut tree, 3, b"--flag");
            end_nested(&mut tree, proc_);
        }
        end_nested(&mut tree, t);
        p.packet(&tree.into_bytes());
        let f = Filter {
            pids: vec![],
            comms: vec!["myapp".into()],
        };
        assert_eq!(p.summary(&f, 10).samples, 4);
        assert!(text(&p, &f, 10).contains("only comm myapp"));
    }

    #[test]
    fn undefined_ids_and_garbage_are_counted_not_fatal() {
        let mut p = Profile::default();
        let mut pk = VecStream::new();
        put_varint(&mut pk, TRUSTED_SEQUENCE_ID, 9);
        let s = begin_nested(&mut pk, PERF_SAMPLE);
        put_varint(&mut pk, 4, 77);
        end_nested(&mut pk, s);
        p.packet(&pk.into_bytes());
        p.packet(&[0xff, 0xff, 0xff]);
        assert_eq!(p.malformed, 2);
        assert_eq!(p.summary(&Filter::default(), 5).samples, 0);
    }
}

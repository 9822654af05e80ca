//! Pure parsers for `/proc/<pid>/{status,stat,cmdline,smaps_rollup}`.
//!
//! Inputs are whatever the kernel (or a fixture) returned; nothing here
//! panics on odd bytes. Fields that do not parse are left `None`.

use crate::traced_probes::fs_root::{leading_i64, leading_u64};

/// Iterates `key: value` lines, yielding the key and the value with leading
/// blanks removed. Lines without a colon are skipped.
pub fn key_values(buf: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    let mut rest = buf;
    std::iter::from_fn(move || loop {
        if rest.is_empty() {
            return None;
        }
        let end = find_byte(rest, b'\n').unwrap_or(rest.len());
        let line = &rest[..end];
        rest = rest.get(end + 1..).unwrap_or_default();
        let Some(colon) = find_byte(line, b':') else {
            continue;
        };
        let mut v = &line[colon + 1..];
        while let [b' ' | b'\t', tail @ ..] = v {
            v = tail;
        }
        return Some((&line[..colon], v));
    })
}

/// Index of the first `needle` in `hay`, eight bytes at a time: a full
/// /proc scan parses every process's `status`, and byte by byte (at
/// opt-level "z" a call per byte) that was half of its user-space time.
pub fn find_byte(hay: &[u8], needle: u8) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let pattern = LO * u64::from(needle);
    let mut words = hay.chunks_exact(8);
    let mut base = 0;
    for w in &mut words {
        let x = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]) ^ pattern;
        // Flags every zero byte of `x` (bytes above a zero may be flagged
        // too, never below one): the lowest flag is the first match.
        let zeros = x.wrapping_sub(LO) & !x & HI;
        if zeros != 0 {
            return Some(base + (zeros.trailing_zeros() / 8) as usize);
        }
        base += 8;
    }
    let tail = words.remainder();
    (0..tail.len())
        .find(|&i| tail[i] == needle)
        .map(|i| base + i)
}

/// Memory counters of `/proc/<pid>/status`, in kB.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StatusMem {
    pub vm_size_kb: Option<u64>,
    pub vm_locked_kb: Option<u64>,
    pub vm_hwm_kb: Option<u64>,
    pub vm_rss_kb: Option<u64>,
    pub rss_anon_kb: Option<u64>,
    pub rss_file_kb: Option<u64>,
    pub rss_shmem_kb: Option<u64>,
    pub vm_swap_kb: Option<u64>,
}

impl StatusMem {
    /// Kernel threads have no `Vm*` lines; like upstream we take `VmSize`
    /// as the marker that memory counters exist.
    pub fn has_counters(&self) -> bool {
        self.vm_size_kb.is_some()
    }
}

/// The fields of `/proc/<pid>/status` the pollers use.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Status {
    /// `Name:` (comm), lossily decoded.
    pub name: Option<String>,
    pub tgid: Option<i32>,
    pub pid: Option<i32>,
    pub ppid: Option<i32>,
    /// Real uid (first `Uid:` column).
    pub uid: Option<i32>,
    /// `NSpid:` ids after the first (root namespace) one; empty when the
    /// task lives in the root pid namespace only.
    pub ns_ids: Vec<i32>,
    /// `Kthread:` (Linux 6.4+); `None` on older kernels.
    pub kthread: Option<bool>,
    /// `Threads:` count.
    pub threads: Option<u32>,
    pub mem: StatusMem,
}

fn to_i32(v: &[u8]) -> Option<i32> {
    leading_i64(v).and_then(|v| i32::try_from(v).ok())
}

/// Parses `/proc/<pid>/status`. Stops at `SigQ:`: every field used here
/// comes before it on all kernels, and the ~25 lines after it (signal
/// masks, capabilities, cpu lists) are the bulk of the parsing cost.
///
/// One scan per line for its end, then at most two prefix compares: a
/// full /proc scan parses every process's status, and splitting each line
/// at its colon and matching the key was a third of its user-space time.
pub fn parse_status(buf: &[u8]) -> Status {
    parse_status_fields(buf, true)
}

/// [`parse_status`] without the memory counters (`mem` stays empty): what
/// a process tree needs. After `Kthread:` it looks only for `Threads:`:
/// the kernel writes the task's ids with `Kthread:` last (6.4+), then the
/// ~19 lines of memory, core dump and THP state, then `Threads:` just
/// before `SigQ:`; those lines are skipped unsplit.
pub fn parse_status_ids(buf: &[u8]) -> Status {
    parse_status_fields(buf, false)
}

fn parse_status_fields(buf: &[u8], mem: bool) -> Status {
    let mut st = Status::default();
    let mut rest = buf;
    while !rest.is_empty() {
        let end = find_byte(rest, b'\n').unwrap_or(rest.len());
        let line = &rest[..end];
        rest = rest.get(end + 1..).unwrap_or_default();
        // The first byte picks the candidate keys; most lines have none.
        // Every number parser below skips leading blanks itself.
        let head = first_word(line);
        match line.first() {
            Some(b'N') => {
                if let Some(v) = field(line, head, K_NAME) {
                    let start = v.iter().position(|&b| b != b' ' && b != b'\t');
                    let name = &v[start.unwrap_or(v.len())..];
                    st.name = Some(String::from_utf8_lossy(name).into_owned());
                } else if let Some(v) = field(line, head, K_NSPID) {
                    st.ns_ids = v
                        .split(|&b| b == b'\t' || b == b' ')
                        .filter(|t| !t.is_empty())
                        .skip(1)
                        .filter_map(to_i32)
                        .collect();
                }
            }
            Some(b'T') => {
                if let Some(v) = field(line, head, K_TGID) {
                    st.tgid = to_i32(v);
                } else if let Some(v) = field(line, head, K_THREADS) {
                    st.threads = leading_u64(v).and_then(|v| u32::try_from(v).ok());
                }
            }
            Some(b'P') => {
                if let Some(v) = field(line, head, K_PID) {
                    st.pid = to_i32(v);
                } else if let Some(v) = field(line, head, K_PPID) {
                    st.ppid = to_i32(v);
                }
            }
            Some(b'U') => {
                if let Some(v) = field(line, head, K_UID) {
                    st.uid = to_i32(v);
                }
            }
            Some(b'K') => {
                if let Some(v) = field(line, head, K_KTHREAD) {
                    st.kthread = match leading_u64(v) {
                        Some(0) => Some(false),
                        Some(1) => Some(true),
                        _ => None,
                    };
                    if !mem {
                        rest = from_line_starting(rest, b"Threads:");
                    }
                }
            }
            Some(b'S') if field(line, head, K_SIGQ).is_some() => break,
            Some(b'V' | b'R') if mem => {
                let m = &mut st.mem;
                let slots = [
                    (const { Key::new(b"VmSize") }, &mut m.vm_size_kb),
                    (const { Key::new(b"VmLck") }, &mut m.vm_locked_kb),
                    (const { Key::new(b"VmHWM") }, &mut m.vm_hwm_kb),
                    (const { Key::new(b"VmRSS") }, &mut m.vm_rss_kb),
                    (const { Key::new(b"RssAnon") }, &mut m.rss_anon_kb),
                    (const { Key::new(b"RssFile") }, &mut m.rss_file_kb),
                    (const { Key::new(b"RssShmem") }, &mut m.rss_shmem_kb),
                    (const { Key::new(b"VmSwap") }, &mut m.vm_swap_kb),
                ];
                for (key, slot) in slots {
                    if let Some(v) = field(line, head, key) {
                        *slot = leading_u64(v);
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    st
}

/// `rest` from its first line that starts with `prefix` (empty if none).
/// Hops over the bytes that cannot start one (`find_byte` of its first
/// byte) instead of over every line.
fn from_line_starting<'a>(rest: &'a [u8], prefix: &[u8]) -> &'a [u8] {
    let mut at = 0;
    while let Some(i) = prefix.first().and_then(|&b| find_byte(&rest[at..], b)) {
        let start = at + i;
        if (start == 0 || rest[start - 1] == b'\n') && rest[start..].starts_with(prefix) {
            return &rest[start..];
        }
        at = start + 1;
    }
    &[]
}

/// A `status` key (at most 8 bytes) as the little-endian word a line
/// starting with it begins with, and the mask of its bytes: a line's key
/// is then one masked compare of its first word (at opt-level "z" a byte
/// loop per key, ~20 per status, was a third of the parse).
#[derive(Clone, Copy)]
struct Key {
    word: u64,
    mask: u64,
    len: usize,
}

impl Key {
    const fn new(key: &[u8]) -> Key {
        assert!(!key.is_empty() && key.len() <= 8);
        let mut word = 0u64;
        let mut i = 0;
        while i < key.len() {
            word |= (key[i] as u64) << (8 * i);
            i += 1;
        }
        let mask = if key.len() == 8 {
            u64::MAX
        } else {
            (1u64 << (8 * key.len())) - 1
        };
        Key {
            word,
            mask,
            len: key.len(),
        }
    }
}

const K_NAME: Key = Key::new(b"Name");
const K_NSPID: Key = Key::new(b"NSpid");
const K_TGID: Key = Key::new(b"Tgid");
const K_THREADS: Key = Key::new(b"Threads");
const K_PID: Key = Key::new(b"Pid");
const K_PPID: Key = Key::new(b"PPid");
const K_UID: Key = Key::new(b"Uid");
const K_KTHREAD: Key = Key::new(b"Kthread");
const K_SIGQ: Key = Key::new(b"SigQ");

/// The first eight bytes of `line` as a little-endian word (zeros past
/// its end).
fn first_word(line: &[u8]) -> u64 {
    if let Some(w) = line.first_chunk::<8>() {
        return u64::from_le_bytes(*w);
    }
    let mut word = 0;
    for (i, &b) in line.iter().enumerate() {
        word |= (b as u64) << (8 * i);
    }
    word
}

/// The value of `line` (whose first word is `head`) if its key (the text
/// before its first colon) is `key`: exactly when the line starts with
/// `key` and a colon.
fn field(line: &[u8], head: u64, key: Key) -> Option<&[u8]> {
    let starts = line.len() > key.len && head & key.mask == key.word;
    (starts && line[key.len] == b':').then(|| &line[key.len + 1..])
}

/// `/proc/<pid>/smaps_rollup` totals, in kB.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SmapsRollup {
    pub rss_kb: Option<u64>,
    pub pss_kb: Option<u64>,
    pub pss_anon_kb: Option<u64>,
    pub pss_file_kb: Option<u64>,
    pub pss_shmem_kb: Option<u64>,
    pub swap_pss_kb: Option<u64>,
}

pub fn parse_smaps_rollup(buf: &[u8]) -> SmapsRollup {
    let mut r = SmapsRollup::default();
    for (k, v) in key_values(buf) {
        let slot = match k {
            b"Rss" => &mut r.rss_kb,
            b"Pss" => &mut r.pss_kb,
            b"Pss_Anon" => &mut r.pss_anon_kb,
            b"Pss_File" => &mut r.pss_file_kb,
            b"Pss_Shmem" => &mut r.pss_shmem_kb,
            b"SwapPss" => &mut r.swap_pss_kb,
            _ => continue,
        };
        *slot = leading_u64(v);
    }
    r
}

/// CPU times and start time from `/proc/<pid>/stat`, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatTimes {
    pub utime_ns: u64,
    pub stime_ns: u64,
    pub start_from_boot_ns: u64,
}

/// Parses utime (field 14), stime (15) and starttime (22) of
/// `/proc/<pid>/stat`. The comm field (2) may contain spaces and
/// parentheses, so fields are counted from the last `)`.
pub fn parse_stat_times(buf: &[u8], ns_per_tick: u64) -> Option<StatTimes> {
    let close = buf.iter().rposition(|&b| b == b')')?;
    // Field 3 (state) is the first token after ")".
    let mut fields = buf[close + 1..]
        .split(|&b| b == b' ' || b == b'\n')
        .filter(|t| !t.is_empty());
    let mut nth = |skip: usize| fields.nth(skip).and_then(leading_u64);
    let utime = nth(14 - 3)?;
    let stime = nth(0)?;
    let start = nth(22 - 16)?;
    Some(StatTimes {
        utime_ns: utime.saturating_mul(ns_per_tick),
        stime_ns: stime.saturating_mul(ns_per_tick),
        start_from_boot_ns: start.saturating_mul(ns_per_tick),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_byte_finds_the_first_match_at_every_offset() {
        for len in 0..40 {
            for at in 0..=len {
                // Bytes just above and below the needle defeat a careless
                // word trick; `at == len` means no match.
                let mut hay: Vec<u8> = (0..len)
                    .map(|i| if i % 2 == 0 { b'9' } else { b';' })
                    .collect();
                if at < len {
                    hay[at] = b':';
                    if at + 1 < len {
                        hay[at + 1] = b':';
                    }
                }
                let want = hay.iter().position(|&b| b == b':');
                assert_eq!(find_byte(&hay, b':'), want, "len {len} at {at}");
            }
        }
        assert_eq!(find_byte(&[0x80, 0, 0xff, b'\n'], b'\n'), Some(3));
        assert_eq!(find_byte(&[0u8; 9], 0), Some(0));
    }

    const STATUS: &[u8] = b"Name:\tmy proc\nUmask:\t0022\nState:\tS (sleeping)\n\
Tgid:\t1234\nNgid:\t0\nPid:\t1234\nPPid:\t1\nTracerPid:\t0\n\
Uid:\t1000\t1000\t1000\t1000\nGid:\t100\t100\t100\t100\nNSpid:\t1234\t7\n\
Kthread:\t0\nVmPeak:\t   10000 kB\nVmSize:\t    9000 kB\nVmLck:\t       4 kB\n\
VmHWM:\t    3000 kB\nVmRSS:\t    2900 kB\nRssAnon:\t    1000 kB\n\
RssFile:\t    1800 kB\nRssShmem:\t     100 kB\nVmSwap:\t      12 kB\nThreads:\t3\n";

    #[test]
    fn status_fields() {
        let st = parse_status(STATUS);
        assert_eq!(st.name.as_deref(), Some("my proc"));
        assert_eq!(
            (st.tgid, st.pid, st.ppid, st.uid),
            (Some(1234), Some(1234), Some(1), Some(1000))
        );
        assert_eq!(st.ns_ids, vec![7]);
        assert_eq!(st.kthread, Some(false));
        assert_eq!(st.threads, Some(3));
        assert_eq!(
            st.mem,
            StatusMem {
                vm_size_kb: Some(9000),
                vm_locked_kb: Some(4),
                vm_hwm_kb: Some(3000),
                vm_rss_kb: Some(2900),
                rss_anon_kb: Some(1000),
                rss_file_kb: Some(1800),
                rss_shmem_kb: Some(100),
                vm_swap_kb: Some(12),
            }
        );
    }

    /// What `parse_status` computed before its one-pass rewrite: lines
    /// through `key_values`, keys matched after the blanks were cut.
    fn status_by_key_values(buf: &[u8]) -> Status {
        let mut st = Status::default();
        for (k, v) in key_values(buf) {
            match k {
                b"SigQ" => break,
                b"Name" => st.name = Some(String::from_utf8_lossy(v).into_owned()),
                b"Tgid" => st.tgid = to_i32(v),
                b"Pid" => st.pid = to_i32(v),
                b"PPid" => st.ppid = to_i32(v),
                b"Uid" => st.uid = to_i32(v),
                b"NSpid" => {
                    st.ns_ids = v
                        .split(|&b| b == b'\t' || b == b' ')
                        .filter(|t| !t.is_empty())
                        .skip(1)
                        .filter_map(to_i32)
                        .collect()
                }
                b"Kthread" => {
                    st.kthread = match leading_u64(v) {
                        Some(0) => Some(false),
                        Some(1) => Some(true),
                        _ => None,
                    }
                }
                b"Threads" => st.threads = leading_u64(v).and_then(|v| u32::try_from(v).ok()),
                b"VmSize" => st.mem.vm_size_kb = leading_u64(v),
                b"VmLck" => st.mem.vm_locked_kb = leading_u64(v),
                b"VmHWM" => st.mem.vm_hwm_kb = leading_u64(v),
                b"VmRSS" => st.mem.vm_rss_kb = leading_u64(v),
                b"RssAnon" => st.mem.rss_anon_kb = leading_u64(v),
                b"RssFile" => st.mem.rss_file_kb = leading_u64(v),
                b"RssShmem" => st.mem.rss_shmem_kb = leading_u64(v),
                b"VmSwap" => st.mem.vm_swap_kb = leading_u64(v),
                _ => {}
            }
        }
        st
    }

    #[test]
    fn one_pass_status_matches_the_line_parser() {
        let mut inputs: Vec<Vec<u8>> = vec![
            STATUS.to_vec(),
            b"Name:\t \t a:b\nPid:\t- 5\nPid:  6\nno colon\nTgid:\t\t7".to_vec(),
            b"\n\n:\n::\nNSpid:\t\t 1 \t 2\t-3\nKthread:\t1x\nSigQ\nThreads: 4".to_vec(),
            b"Threads:\t99999999999\nSigQ:\t1\nPid:\t2\n".to_vec(),
            b"Name:\t\xff\xfe\nUid:\t-1\t0\nVmSwap:\t 12 kB".to_vec(),
            b"Pidx:\t9\nPid\t8\nSigQx: 1\nPPid:3\nVm:1\nRss:2\nSigQ:\nPid:\t2".to_vec(),
            b"N\nNa:\nNSpid:1 2\nNSpid:\nT:\nTgid\nVmRSSx: 4\nVmRSS:5:6\nK\nKthread:0".to_vec(),
        ];
        if let Ok(own) = std::fs::read("/proc/self/status") {
            inputs.push(own);
        }
        // Every prefix of the fixture: lines cut anywhere.
        inputs.extend((0..STATUS.len()).map(|n| STATUS[..n].to_vec()));
        for input in &inputs {
            let want = status_by_key_values(input);
            assert_eq!(
                parse_status(input),
                want,
                "{:?}",
                String::from_utf8_lossy(input)
            );
            let ids = Status {
                mem: StatusMem::default(),
                ..status_by_key_values(&without_lines_after_kthread(input))
            };
            assert_eq!(parse_status_ids(input), ids);
        }
    }

    /// `buf` without the lines from each `Kthread:` line to the next line
    /// that starts with `Threads:` (to the end if none): what
    /// `parse_status_ids` does not look at.
    fn without_lines_after_kthread(buf: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut skipping = false;
        for line in buf.split_inclusive(|&b| b == b'\n') {
            skipping &= !line.starts_with(b"Threads:");
            if !skipping {
                out.extend_from_slice(line);
            }
            skipping |= line.starts_with(b"Kthread:");
        }
        out
    }

    #[test]
    fn ids_skip_what_a_kernel_writes_between_kthread_and_threads() {
        let st = parse_status_ids(
            b"Kthread:\t0\nPid:\t3\nSigQ:\t0\nThreads:\t4\nPid:\t5\nSigQ:\t0\nPid:\t6",
        );
        assert_eq!(
            (st.kthread, st.threads, st.pid),
            (Some(false), Some(4), Some(5))
        );
        let st = parse_status_ids(b"Kthread:\t1\nxThreads:\t2\nThreadsX:\t3\n");
        assert_eq!((st.kthread, st.threads), (Some(true), None));
    }

    /// On every status this machine has, the ids parser and the full one
    /// agree: the kernel's order is as `parse_status_ids` expects.
    #[test]
    fn ids_of_every_live_status_match_the_full_parse() {
        let mut n = 0;
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(buf) = std::fs::read(e.path().join("status")) else {
                continue;
            };
            let full = parse_status(&buf);
            let ids = Status {
                mem: StatusMem::default(),
                ..full
            };
            assert_eq!(parse_status_ids(&buf), ids, "{}", e.path().display());
            n += 1;
        }
        assert!(n > 1);
    }

    #[test]
    fn fields_after_sigq_are_ignored() {
        let st = parse_status(b"Pid:\t1\nSigQ:\t0/100\nThreads:\t9\n");
        assert_eq!((st.pid, st.threads), (Some(1), None));
    }

    #[test]
    fn kernel_thread_status_has_no_mem() {
        let st = parse_status(b"Name:\tkworker/0:1\nPid:\t20\nTgid:\t20\nPPid:\t2\nKthread:\t1\n");
        assert!(!st.mem.has_counters());
        assert_eq!(st.kthread, Some(true));
        assert!(st.ns_ids.is_empty());
    }

    #[test]
    fn garbage_status_does_not_panic() {
        for input in [
            &b""[..],
            b":",
            b"Pid:",
            b"Pid:\t-",
            b"NSpid:\t\t\t",
            b"\xff\xfe:\xff",
            b"Kthread: 7",
        ] {
            let st = parse_status(input);
            assert_eq!(st.pid, None);
            assert_eq!(st.kthread, None);
        }
    }

    #[test]
    fn stat_times_with_hostile_comm() {
        let stat = b"42 (a) b) (c) S 1 42 42 0 -1 4194560 100 0 0 0 250 130 0 0 20 0 1 0 777 1000 200 18446744073709551615\n";
        let t = parse_stat_times(stat, 10_000_000).unwrap();
        assert_eq!(t.utime_ns, 2_500_000_000);
        assert_eq!(t.stime_ns, 1_300_000_000);
        assert_eq!(t.start_from_boot_ns, 7_770_000_000);
        assert_eq!(parse_stat_times(b"42 (x) S 1 2", 1), None);
        assert_eq!(parse_stat_times(b"", 1), None);
    }

    #[test]
    fn smaps_rollup() {
        let r = parse_smaps_rollup(b"55d0-7ffd ---p 00000000 00:00 0 [rollup]\nRss:  100 kB\nPss:  80 kB\nPss_Anon: 50 kB\nPss_File: 20 kB\nPss_Shmem: 10 kB\nSwapPss: 3 kB\n");
        assert_eq!(r.rss_kb, Some(100));
        assert_eq!(r.pss_kb, Some(80));
        assert_eq!(r.swap_pss_kb, Some(3));
    }
}

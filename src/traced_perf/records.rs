//! Records of a perf ring buffer (`PERF_RECORD_*`), as written for the
//! attributes traced_perf opens with: sample_type TID | TIME | CPU |
//! PERIOD | READ (read_format GROUP: the timebase's count, then any
//! followers') | CALLCHAIN | REGS_USER | STACK_USER (as configured), and
//! sample_id_all. Pure code over byte slices; the
//! ring's bytes come from the kernel but are checked like untrusted input.

pub const RECORD_LOST: u32 = 2;
pub const RECORD_COMM: u32 = 3;
/// `misc` bit of a COMM record written by exec.
pub const MISC_COMM_EXEC: u16 = 1 << 13;
pub const RECORD_THROTTLE: u32 = 5;
pub const RECORD_SAMPLE: u32 = 9;

/// Callchain entries at or above this value are context markers.
pub const CONTEXT_MAX: u64 = (-4095i64) as u64;
pub const CONTEXT_KERNEL: u64 = (-128i64) as u64;
pub const CONTEXT_USER: u64 = (-512i64) as u64;

/// Longest callchain we keep (the kernel's default limit is 127).
pub const MAX_FRAMES: usize = 256;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Sample {
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub cpu: u32,
    pub period: u64,
    /// `misc & 7`: 1 kernel, 2 user, 3 hypervisor, 4/5 guest.
    pub cpu_mode: u8,
    pub kernel_ips: Vec<u64>,
    pub user_ips: Vec<u64>,
    /// Set by the caller: samples carry a group read (the leader's count,
    /// then each follower's), decoded into `counts`.
    pub group: bool,
    pub counts: Vec<u64>,
    /// Set by the caller: what the attributes ask each sample to carry.
    pub layout: Layout,
    /// PERF_SAMPLE_REGS_USER in mask order; empty for a kernel thread
    /// (ABI none).
    pub user_regs: Vec<u64>,
    /// PERF_SAMPLE_STACK_USER: where in the record the bytes the kernel
    /// copied from the user stack pointer up are (offset, dyn_size).
    /// [`parse`] does not copy them: most samples are out of scope.
    pub stack_span: Option<(usize, usize)>,
    /// Those bytes, once the caller copied them ([`Sample::take_stack`]).
    pub stack: Vec<u8>,
    /// The copy filled the whole requested size: the stack may go on.
    pub stack_cut: bool,
}

impl Sample {
    /// Copies the stack bytes of the record `parse` read into `stack`.
    pub fn take_stack(&mut self, rec: &[u8]) {
        self.stack.clear();
        if let Some((at, n)) = self.stack_span {
            if let Some(b) = rec.get(at..at + n) {
                self.stack.extend_from_slice(b);
            }
        }
    }
}

/// The optional parts of a sample record, from the attributes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// read_format has PERF_FORMAT_LOST: each value of the group read is
    /// followed by its event's lost count.
    pub read_lost: bool,
    pub callchain: bool,
    /// Registers in sample_regs_user (0: none asked).
    pub user_regs: usize,
    pub user_stack: bool,
}

/// Members of a group read kept (the leader and its followers).
pub const MAX_COUNTS: usize = 65;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// Decoded into the caller's [`Sample`].
    Sample,
    Lost {
        lost: u64,
        time: Option<u64>,
    },
    Throttle,
    /// A process exec'd (a COMM record from exec): its command line and
    /// maps are new; `comm` is its new task name (the program's file name,
    /// at most 15 bytes).
    Exec {
        pid: u32,
        comm: [u8; 16],
    },
    Other,
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

/// Size of the record starting at `header` (8 header bytes), if sane.
pub fn record_size(header: &[u8]) -> Option<usize> {
    let size = u16::from_ne_bytes(header.get(6..8)?.try_into().ok()?) as usize;
    (size >= 8 && size.is_multiple_of(8)).then_some(size)
}

/// `N` bytes of a ring from byte counter `at`, wrapping its end (the
/// one division per call matters: a pass reads every record's header).
fn ring_bytes<const N: usize>(data: &[u8], at: u64) -> [u8; N] {
    let size = data.len();
    let pos = (at % size as u64) as usize;
    match data.get(pos..pos + N) {
        Some(b) => std::array::from_fn(|k| b[k]),
        None => std::array::from_fn(|k| data[(pos + k) % size]),
    }
}

/// Calls `f(type, misc, start, len)` for each whole record between `tail`
/// and `head` of a ring (byte counters), reading headers alone: no record
/// is copied or decoded. Stops at the first insane header.
fn walk_headers(
    data_untrusted: &[u8],
    mut tail: u64,
    head: u64,
    mut f: impl FnMut(u32, u16, u64, u64),
) {
    let size = data_untrusted.len() as u64;
    if size == 0 || head < tail || head - tail > size {
        return;
    }
    while head - tail >= 8 {
        let h: [u8; 8] = ring_bytes(data_untrusted, tail);
        let ty = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]);
        let misc = u16::from_ne_bytes([h[4], h[5]]);
        let len = u16::from_ne_bytes([h[6], h[7]]) as u64;
        if len < 8 || !len.is_multiple_of(8) || len > head - tail {
            break;
        }
        f(ty, misc, tail, len);
        tail += len;
    }
}

/// What the records between `tail` and `head` of a ring stand for, read
/// from their headers alone: (samples, lost records the kernel counted).
/// The stop counts what it could not read with this: it runs after the
/// stop's reading time is spent, so it hops from header to header (a
/// debug build counts a full 8 MiB ring in a few milliseconds).
pub fn count_unread(data_untrusted: &[u8], tail: u64, head: u64) -> (u64, u64) {
    let (mut samples, mut lost) = (0u64, 0u64);
    walk_headers(data_untrusted, tail, head, |ty, _, at, len| {
        if ty == RECORD_SAMPLE {
            samples += 1;
        } else if ty == RECORD_LOST && len >= 24 {
            lost += u64::from_ne_bytes(ring_bytes(data_untrusted, at + 16));
        }
    });
    (samples, lost)
}

/// The exec COMM records between `tail` and `head` of a ring: `f(pid,
/// comm)` for each, read before a pass decodes the ring's samples. A
/// process gone by then is judged by the name it exec'd, even when its
/// exec sits in a ring the pass reads after its samples.
pub fn exec_comms_in(data_untrusted: &[u8], tail: u64, head: u64, mut f: impl FnMut(u32, &[u8])) {
    walk_headers(data_untrusted, tail, head, |ty, misc, at, len| {
        if ty == RECORD_COMM && misc & MISC_COMM_EXEC != 0 && len >= 32 {
            let pid: [u8; 4] = ring_bytes(data_untrusted, at + 8);
            let name: [u8; 16] = ring_bytes(data_untrusted, at + 16);
            let n = name.iter().position(|&c| c == 0).unwrap_or(16).min(15);
            f(u32::from_ne_bytes(pid), &name[..n]);
        }
    });
}

/// The leader's lost count in a group read (read_format GROUP | LOST:
/// nr, then value and lost per member).
pub fn leader_lost(read_untrusted: &[u8]) -> Option<u64> {
    (u64_at(read_untrusted, 0)? >= 1).then_some(())?;
    u64_at(read_untrusted, 16)
}

/// Decodes one whole record (header included). `None` if malformed.
/// A sample is decoded into `sample`, whose frame vectors are reused.
pub fn parse(rec_untrusted: &[u8], sample: &mut Sample) -> Option<Record> {
    let b = rec_untrusted;
    let ty = u32_at(b, 0)?;
    let misc = u16::from_ne_bytes(b.get(4..6)?.try_into().ok()?);
    match ty {
        RECORD_SAMPLE => {
            sample.pid = u32_at(b, 8)?;
            sample.tid = u32_at(b, 12)?;
            sample.time = u64_at(b, 16)?;
            sample.cpu = u32_at(b, 24)?;
            sample.period = u64_at(b, 32)?;
            sample.cpu_mode = (misc & 7) as u8;
            let mut at = 40;
            sample.counts.clear();
            if sample.group {
                let n = u64_at(b, at)? as usize;
                if n > MAX_COUNTS {
                    return None;
                }
                let stride = if sample.layout.read_lost { 16 } else { 8 };
                for i in 0..n {
                    sample.counts.push(u64_at(b, at + 8 + stride * i)?);
                }
                at += 8 + stride * n;
            }
            sample.kernel_ips.clear();
            sample.user_ips.clear();
            sample.user_regs.clear();
            sample.stack.clear();
            sample.stack_span = None;
            sample.stack_cut = false;
            let layout = sample.layout;
            if layout.callchain {
                at = parse_callchain(b, at, sample)?;
            }
            if layout.user_regs > 0 {
                let abi = u64_at(b, at)?;
                at += 8;
                if abi != 0 {
                    for i in 0..layout.user_regs {
                        sample.user_regs.push(u64_at(b, at + 8 * i)?);
                    }
                    at += 8 * layout.user_regs;
                }
            }
            if layout.user_stack {
                let size = u64_at(b, at)? as usize;
                at += 8;
                if size > 0 {
                    let data = b.get(at..at.checked_add(size)?)?;
                    let dyn_size = u64_at(b, at + size)? as usize;
                    let _ = data;
                    sample.stack_span = Some((at, dyn_size.min(size)));
                    sample.stack_cut = dyn_size >= size;
                }
            }
            Some(Record::Sample)
        }
        RECORD_LOST => {
            let lost = u64_at(b, 16)?;
            // sample_id trailer: pid, tid, time, cpu.
            Some(Record::Lost {
                lost,
                time: u64_at(b, 32),
            })
        }
        RECORD_THROTTLE => Some(Record::Throttle),
        RECORD_COMM if misc & MISC_COMM_EXEC != 0 => {
            let mut comm = [0u8; 16];
            let name = b.get(16..b.len().min(32))?;
            let n = name
                .iter()
                .position(|&c| c == 0)
                .unwrap_or(name.len())
                .min(15);
            comm[..n].copy_from_slice(&name[..n]);
            Some(Record::Exec {
                pid: u32_at(b, 8)?,
                comm,
            })
        }
        _ => Some(Record::Other),
    }
}

/// The callchain at `at`: kernel and user sections into `sample`.
/// Returns the offset after it.
fn parse_callchain(b: &[u8], at: usize, sample: &mut Sample) -> Option<usize> {
    let nr = u64_at(b, at)? as usize;
    let end = (at + 8).checked_add(nr.checked_mul(8)?)?;
    let ips = b.get(at + 8..end)?;
    let mut ctx = CONTEXT_KERNEL;
    for c in ips.chunks_exact(8) {
        let ip = u64::from_ne_bytes(c.try_into().ok()?);
        if ip >= CONTEXT_MAX {
            ctx = ip;
            continue;
        }
        let v = match ctx {
            CONTEXT_KERNEL => &mut sample.kernel_ips,
            CONTEXT_USER => &mut sample.user_ips,
            _ => continue,
        };
        if v.len() < MAX_FRAMES {
            v.push(ip);
        }
    }
    Some(end)
}

/// The next record of a ring between `tail` and `head` (byte counters
/// that only grow). A record that wraps the end of `data` is copied into
/// `scratch`; others are borrowed in place. Returns the record and its
/// size, or `None` when nothing whole is left or the ring is corrupt.
pub fn next<'a>(
    data: &'a [u8],
    tail: u64,
    head: u64,
    scratch: &'a mut Vec<u8>,
) -> Option<&'a [u8]> {
    let size = data.len();
    if size == 0 || head <= tail || head - tail < 8 || head - tail > size as u64 {
        return None;
    }
    let pos = (tail % size as u64) as usize;
    let read = |scratch: &mut Vec<u8>, n: usize| {
        scratch.clear();
        let first = n.min(size - pos);
        scratch.extend_from_slice(&data[pos..pos + first]);
        scratch.extend_from_slice(&data[..n - first]);
    };
    let len = if pos + 8 <= size {
        record_size(&data[pos..pos + 8])?
    } else {
        read(scratch, 8);
        record_size(scratch)?
    };
    if len as u64 > head - tail || len > size {
        return None;
    }
    if pos + len <= size {
        Some(&data[pos..pos + len])
    } else {
        read(scratch, len);
        Some(&scratch[..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_bytes(ips: &[u64]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&RECORD_SAMPLE.to_ne_bytes());
        b.extend_from_slice(&2u16.to_ne_bytes());
        b.extend_from_slice(&((48 + 8 * ips.len()) as u16).to_ne_bytes());
        for v in [7u32, 8] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.extend_from_slice(&1000u64.to_ne_bytes());
        b.extend_from_slice(&1u32.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(&5u64.to_ne_bytes());
        b.extend_from_slice(&(ips.len() as u64).to_ne_bytes());
        for ip in ips {
            b.extend_from_slice(&ip.to_ne_bytes());
        }
        b
    }

    #[test]
    fn sample_splits_kernel_and_user_frames() {
        let b = sample_bytes(&[CONTEXT_KERNEL, 0xffff1, 0xffff2, CONTEXT_USER, 0x401000]);
        let mut s = chained();
        assert_eq!(parse(&b, &mut s), Some(Record::Sample));
        assert_eq!((s.pid, s.tid, s.time, s.cpu, s.period), (7, 8, 1000, 1, 5));
        assert_eq!(s.kernel_ips, vec![0xffff1, 0xffff2]);
        assert_eq!(s.user_ips, vec![0x401000]);
        assert_eq!(s.cpu_mode, 2);
    }

    /// With a group read, the counts sit between the period and the
    /// callchain.
    #[test]
    fn exec_comm_records_name_the_pid() {
        let mut rec = vec![0u8; 32];
        rec[0..4].copy_from_slice(&RECORD_COMM.to_ne_bytes());
        rec[6..8].copy_from_slice(&32u16.to_ne_bytes());
        rec[8..12].copy_from_slice(&42u32.to_ne_bytes());
        let mut s = Sample::default();
        assert_eq!(parse(&rec, &mut s), Some(Record::Other), "prctl rename");
        rec[16..21].copy_from_slice(b"hot\0\0");
        rec[4..6].copy_from_slice(&MISC_COMM_EXEC.to_ne_bytes());
        let mut comm = [0u8; 16];
        comm[..3].copy_from_slice(b"hot");
        assert_eq!(parse(&rec, &mut s), Some(Record::Exec { pid: 42, comm }));
    }

    /// A one-frame user sample with `read` (a group read) before its
    /// callchain.
    fn sample_with_group_read(read: &[u64]) -> Vec<u8> {
        let plain = sample_bytes(&[CONTEXT_USER, 0x401000]);
        let mut b = plain[..40].to_vec();
        for v in read {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.extend_from_slice(&plain[40..]);
        let size = b.len() as u16;
        b[6..8].copy_from_slice(&size.to_ne_bytes());
        b
    }

    #[test]
    fn group_read_precedes_the_callchain() {
        let mut b = sample_with_group_read(&[2, 900, 33]);
        let mut s = Sample {
            group: true,
            ..chained()
        };
        assert_eq!(parse(&b, &mut s), Some(Record::Sample));
        assert_eq!(s.counts, vec![900, 33]);
        assert_eq!(s.user_ips, vec![0x401000]);
        b[40..48].copy_from_slice(&1000u64.to_ne_bytes());
        assert_eq!(parse(&b, &mut s), None);
    }

    #[test]
    fn a_group_read_with_lost_counts_skips_them() {
        let b = sample_with_group_read(&[2, 900, 4, 33, 0]);
        let mut s = Sample {
            group: true,
            ..chained()
        };
        s.layout.read_lost = true;
        assert_eq!(parse(&b, &mut s), Some(Record::Sample));
        assert_eq!(s.counts, vec![900, 33]);
        assert_eq!(s.user_ips, vec![0x401000]);
        assert_eq!(leader_lost(&b[40..80]), Some(4));
        assert_eq!(leader_lost(&0u64.to_ne_bytes()), None);
        assert_eq!(leader_lost(&[1, 2]), None);
    }

    #[test]
    fn truncated_callchain_is_rejected() {
        let mut b = sample_bytes(&[CONTEXT_USER, 1, 2]);
        b[40..48].copy_from_slice(&1000u64.to_ne_bytes());
        assert_eq!(parse(&b, &mut chained()), None);
        b[40..48].copy_from_slice(&u64::MAX.to_ne_bytes());
        assert_eq!(parse(&b, &mut chained()), None);
    }

    fn chained() -> Sample {
        Sample {
            layout: Layout {
                callchain: true,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// REGS_USER then STACK_USER after the callchain: the registers in
    /// mask order, the used part of the stack copy, and whether it was full.
    #[test]
    fn user_registers_and_stack_follow_the_callchain() {
        let mut b = sample_bytes(&[CONTEXT_KERNEL, 0xffff1]);
        for v in [2u64, 0x10, 0x20, 0x30] {
            b.extend_from_slice(&v.to_ne_bytes()); // abi 64, 3 registers
        }
        b.extend_from_slice(&16u64.to_ne_bytes());
        b.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]);
        b.extend_from_slice(&8u64.to_ne_bytes()); // dyn_size
        let mut s = Sample {
            layout: Layout {
                callchain: true,
                user_regs: 3,
                user_stack: true,
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(parse(&b, &mut s), Some(Record::Sample));
        assert_eq!(s.kernel_ips, vec![0xffff1]);
        assert_eq!(s.user_regs, vec![0x10, 0x20, 0x30]);
        s.take_stack(&b);
        assert_eq!(s.stack, vec![1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(!s.stack_cut);
        // A full copy; then a stack size past the record.
        let n = b.len();
        b[n - 8..].copy_from_slice(&16u64.to_ne_bytes());
        parse(&b, &mut s).unwrap();
        s.take_stack(&b);
        assert!(s.stack_cut && s.stack.len() == 16);
        let at = n - 8 - 16 - 8;
        b[at..at + 8].copy_from_slice(&u64::MAX.to_ne_bytes());
        assert_eq!(parse(&b, &mut s), None);
    }

    #[test]
    fn random_rings_never_panic() {
        let mut seed = 1u64;
        let mut scratch = Vec::new();
        let mut sample = Sample {
            layout: Layout {
                callchain: true,
                user_regs: 3,
                user_stack: true,
                ..Default::default()
            },
            ..Default::default()
        };
        for _ in 0..500 {
            let mut data = sample_bytes(&[CONTEXT_KERNEL, 1, CONTEXT_USER, 2]);
            data.resize(128, 0);
            for _ in 0..6 {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                let at = (seed >> 33) as usize % data.len();
                data[at] = (seed >> 13) as u8;
            }
            let (mut tail, head) = (seed % 256, seed % 256 + (seed >> 40) % 200);
            while let Some(r) = next(&data, tail, head, &mut scratch) {
                tail += r.len() as u64;
                let _ = parse(r, &mut sample);
            }
        }
    }

    #[test]
    fn wrapped_record_is_copied() {
        let rec = sample_bytes(&[CONTEXT_USER, 0x1234]);
        let mut data = vec![0u8; 128];
        // Place the record so it wraps: starts at 100 of 128.
        for (i, byte) in rec.iter().enumerate() {
            data[(100 + i) % 128] = *byte;
        }
        let mut scratch = Vec::new();
        let tail = 128 * 3 + 100;
        let r = next(&data, tail, tail + rec.len() as u64, &mut scratch).unwrap();
        assert_eq!(r, &rec[..]);
        assert!(next(&data, tail, tail + 4, &mut scratch).is_none());
    }

    /// A record that does not wrap is read in place: no copy.
    #[test]
    fn a_whole_record_is_borrowed_from_the_ring() {
        let rec = sample_bytes(&[CONTEXT_USER, 0x1234]);
        let mut data = vec![0u8; 128];
        data[8..8 + rec.len()].copy_from_slice(&rec);
        let mut scratch = Vec::new();
        let r = next(&data, 128 + 8, 128 + 8 + rec.len() as u64, &mut scratch).unwrap();
        assert_eq!(r, &rec[..]);
        assert_eq!(r.as_ptr(), data[8..].as_ptr(), "a copy");
        assert!(scratch.is_empty());
    }

    /// The stop's count: samples and the kernel's LOST counts, a LOST
    /// record wrapping the ring's end included; an insane header ends it.
    #[test]
    fn unread_records_are_counted_from_their_headers() {
        let sample = sample_bytes(&[CONTEXT_USER, 0x1234]);
        let mut lost = Vec::new();
        lost.extend_from_slice(&RECORD_LOST.to_ne_bytes());
        lost.extend_from_slice(&0u16.to_ne_bytes());
        lost.extend_from_slice(&32u16.to_ne_bytes());
        lost.extend_from_slice(&9u64.to_ne_bytes()); // id
        lost.extend_from_slice(&77u64.to_ne_bytes()); // lost
        lost.extend_from_slice(&0u64.to_ne_bytes()); // sample_id
        let mut ring = sample.clone();
        ring.extend_from_slice(&lost);
        ring.extend_from_slice(&sample);
        let size = 256;
        let mut data = vec![0u8; size];
        // Starts 8 bytes before the end: the first sample and LOST wrap.
        let start = size - 8;
        for (i, b) in ring.iter().enumerate() {
            data[(start + i) % size] = *b;
        }
        let tail = (size * 5 + start) as u64;
        let head = tail + ring.len() as u64;
        assert_eq!(count_unread(&data, tail, head), (2, 77));
        // A head mid-record counts only the whole ones.
        assert_eq!(count_unread(&data, tail, head - 8), (1, 77));
        // A zero size ends the count; a ring overrun yields nothing.
        data[(start + sample.len() + 6) % size] = 0;
        data[(start + sample.len() + 7) % size] = 0;
        assert_eq!(count_unread(&data, tail, head), (1, 0));
        assert_eq!(count_unread(&data, tail, tail + size as u64 + 8), (0, 0));
        assert_eq!(count_unread(&[], 0, 64), (0, 0));
    }

    /// Exec records are found from their headers, one wrapping the
    /// ring's end included; other records are passed over.
    #[test]
    fn exec_records_are_found_before_the_samples_are_read() {
        let sample = sample_bytes(&[CONTEXT_USER, 0x1234]);
        let mut comm = vec![0u8; 40];
        comm[0..4].copy_from_slice(&RECORD_COMM.to_ne_bytes());
        comm[4..6].copy_from_slice(&MISC_COMM_EXEC.to_ne_bytes());
        comm[6..8].copy_from_slice(&40u16.to_ne_bytes());
        comm[8..12].copy_from_slice(&42u32.to_ne_bytes());
        comm[16..25].copy_from_slice(b"deep_prog");
        let mut plain = comm.clone();
        plain[4..6].copy_from_slice(&0u16.to_ne_bytes());
        let mut ring = sample.clone();
        ring.extend_from_slice(&comm);
        ring.extend_from_slice(&plain);
        let size = 256;
        let mut data = vec![0u8; size];
        let start = size - sample.len() - 16; // the exec record wraps
        for (i, b) in ring.iter().enumerate() {
            data[(start + i) % size] = *b;
        }
        let tail = (size * 3 + start) as u64;
        let mut seen = Vec::new();
        exec_comms_in(&data, tail, tail + ring.len() as u64, |pid, name| {
            seen.push((pid, name.to_vec()))
        });
        assert_eq!(seen, [(42, b"deep_prog".to_vec())]);
    }
}

//! Compact encoding of sched_switch / sched_waking
//! (`FtraceEventBundle.compact_sched`): parallel packed arrays, delta-coded
//! timestamps and an intern table of comms. Used only when the kernel's
//! formats look as expected; otherwise the events are written in full.

use super::format::{EventFormat, FieldType};
use super::packet_buf::PacketBuf;
use super::page_parser::ParseError;
use super::translate::{read_int, read_uint, TranslationTable};

/// Start a new bundle once this many distinct comms are interned.
pub const INTERNER_THRESHOLD: usize = 64;

/// Bundle field holding the compact events.
const BUNDLE_COMPACT_SCHED: u32 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwitchFormat {
    pub event_id: u32,
    /// Bytes a record must have to contain every field used.
    pub size: usize,
    pub prev_state: (usize, usize),
    pub prev_pid: usize,
    pub next_pid: usize,
    pub next_prio: usize,
    pub next_comm: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakingFormat {
    pub event_id: u32,
    pub size: usize,
    pub pid: usize,
    pub target_cpu: usize,
    pub prio: usize,
    pub comm: usize,
    pub common_flags: usize,
}

/// Both layouts; compact sched is all or nothing per kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactSchedFormat {
    pub switch: SwitchFormat,
    pub waking: WakingFormat,
}

fn field(f: &EventFormat, name: &str, ty: &[FieldType], size: u16) -> Option<usize> {
    let fl = f.field(name)?;
    (fl.ty.is_some_and(|t| ty.contains(&t)) && fl.size == size).then_some(fl.offset as usize)
}

fn end(f: &EventFormat, names: &[&str]) -> usize {
    names
        .iter()
        .filter_map(|n| f.field(n))
        .map(|fl| fl.offset as usize + fl.size as usize)
        .max()
        .unwrap_or(0)
}

/// Checks the kernel's sched_switch and sched_waking formats. `None` means
/// "write these events in full".
pub fn validate(switch: &EventFormat, waking: &EventFormat) -> Option<CompactSchedFormat> {
    use FieldType as F;
    let state = switch.field("prev_state")?;
    if !matches!(state.ty, Some(F::Int32 | F::Int64)) {
        return None;
    }
    let sw = SwitchFormat {
        event_id: switch.id,
        size: end(
            switch,
            &[
                "prev_pid",
                "prev_state",
                "next_pid",
                "next_prio",
                "next_comm",
            ],
        ),
        prev_state: (state.offset as usize, state.size as usize),
        prev_pid: field(switch, "prev_pid", &[F::Pid32], 4)?,
        next_pid: field(switch, "next_pid", &[F::Pid32], 4)?,
        next_prio: field(switch, "next_prio", &[F::Int32], 4)?,
        next_comm: field(switch, "next_comm", &[F::FixedCString], 16)?,
    };
    let wk = WakingFormat {
        event_id: waking.id,
        size: end(
            waking,
            &["pid", "target_cpu", "prio", "comm", "common_flags"],
        ),
        pid: field(waking, "pid", &[F::Pid32], 4)?,
        target_cpu: field(waking, "target_cpu", &[F::Int32], 4)?,
        prio: field(waking, "prio", &[F::Int32], 4)?,
        comm: field(waking, "comm", &[F::FixedCString], 16)?,
        common_flags: field(waking, "common_flags", &[F::Uint8], 1)?,
    };
    Some(CompactSchedFormat {
        switch: sw,
        waking: wk,
    })
}

/// [`validate`] on the sched_switch and sched_waking formats of `table`
/// (`None` also when the kernel lacks either event).
pub fn for_table(table: &TranslationTable) -> Option<CompactSchedFormat> {
    let format = |name| table.event_by_name("sched", name).map(|e| &e.format);
    validate(format("sched_switch")?, format("sched_waking")?)
}

/// Events of one bundle, waiting to be written.
#[derive(Debug, Default)]
pub struct CompactSchedBuffer {
    /// Interned comms as [`comm_key`]s: a lookup is a few integer
    /// compares, not a string compare per entry.
    intern: Vec<u128>,
    /// A hint per hash slot of a key: 1 + its index in `intern` (0: none).
    /// Lookups go through it and scan `intern` only on a miss.
    intern_index: Vec<u16>,
    sw_ts: Vec<u64>,
    sw_last_ts: u64,
    sw_prev_state: Vec<i64>,
    sw_next_pid: Vec<i32>,
    sw_next_prio: Vec<i32>,
    sw_next_comm: Vec<u32>,
    wk_ts: Vec<u64>,
    wk_last_ts: u64,
    wk_pid: Vec<i32>,
    wk_target_cpu: Vec<i32>,
    wk_prio: Vec<i32>,
    wk_comm: Vec<u32>,
    wk_flags: Vec<u32>,
}

fn i32_at(rec: &[u8], off: usize) -> Result<i32, ParseError> {
    rec.get(off..off.wrapping_add(4))
        .and_then(|b| b.try_into().ok())
        .map(i32::from_le_bytes)
        .ok_or(ParseError::ShortCompactEvent)
}

fn comm_at(rec: &[u8], off: usize) -> Result<&[u8; 16], ParseError> {
    rec.get(off..off.wrapping_add(16))
        .and_then(|b| b.try_into().ok())
        .ok_or(ParseError::ShortCompactEvent)
}

/// A task comm as the kernel stores it (16 bytes, NUL-terminated unless
/// full) as one integer with every byte from the first NUL on cleared, so
/// names compare equal whatever stale bytes follow the NUL.
fn comm_key(comm: &[u8; 16]) -> u128 {
    const LO: u128 = u128::from_le_bytes([0x01; 16]);
    const HI: u128 = u128::from_le_bytes([0x80; 16]);
    let v = u128::from_le_bytes(*comm);
    // The lowest flagged byte is exactly the first zero byte (borrows
    // only cause false flags above a real zero).
    let zeros = v.wrapping_sub(LO) & !v & HI;
    if zeros == 0 {
        return v;
    }
    let first_nul = zeros.trailing_zeros() / 8;
    v & ((1u128 << (first_nul * 8)) - 1)
}

/// The name bytes of a [`comm_key`].
fn comm_name(key: u128) -> ([u8; 16], usize) {
    let len = (128 - key.leading_zeros() as usize).div_ceil(8);
    (key.to_le_bytes(), len)
}

/// Hash slots of the intern index (a bundle interns at most a few dozen
/// comms before a new one starts).
const INDEX_SLOTS: usize = 256;

fn index_slot(key: u128) -> usize {
    let folded = key as u64 ^ (key >> 64) as u64;
    (folded.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize
}

/// int32 array values, negative ones sign-extended to 64 bits.
fn i(v: &[i32]) -> impl ExactSizeIterator<Item = u64> + '_ {
    v.iter().map(|&x| x as i64 as u64)
}

fn u(v: &[u32]) -> impl ExactSizeIterator<Item = u64> + '_ {
    v.iter().map(|&x| x as u64)
}

impl CompactSchedBuffer {
    fn intern(&mut self, comm: &[u8; 16]) -> u32 {
        let key = comm_key(comm);
        if self.intern_index.is_empty() {
            self.intern_index.resize(INDEX_SLOTS, 0);
        }
        let slot = index_slot(key);
        let hint = self.intern_index[slot] as usize;
        if hint != 0 && self.intern.get(hint - 1) == Some(&key) {
            return (hint - 1) as u32;
        }
        let i = match self.intern.iter().position(|&c| c == key) {
            Some(i) => i,
            None => {
                self.intern.push(key);
                self.intern.len() - 1
            }
        };
        // The latest key of a slot wins; a key too far in keeps scanning.
        self.intern_index[slot] = u16::try_from(i + 1).unwrap_or(0);
        i as u32
    }

    pub fn interned(&self) -> usize {
        self.intern.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sw_ts.is_empty() && self.wk_ts.is_empty()
    }

    /// Number of (switch, waking) events held.
    pub fn len(&self) -> (usize, usize) {
        (self.sw_ts.len(), self.wk_ts.len())
    }

    pub fn add_switch(&mut self, ts: u64, rec: &[u8], f: &SwitchFormat) -> Result<(), ParseError> {
        if rec.len() < f.size {
            return Err(ParseError::ShortCompactEvent);
        }
        let state =
            read_int(rec, f.prev_state.0, f.prev_state.1).ok_or(ParseError::ShortCompactEvent)?;
        let (pid, prio) = (i32_at(rec, f.next_pid)?, i32_at(rec, f.next_prio)?);
        let comm = self.intern(comm_at(rec, f.next_comm)?);
        self.sw_ts.push(ts.wrapping_sub(self.sw_last_ts));
        self.sw_last_ts = ts;
        self.sw_prev_state.push(state);
        self.sw_next_pid.push(pid);
        self.sw_next_prio.push(prio);
        self.sw_next_comm.push(comm);
        Ok(())
    }

    pub fn add_waking(&mut self, ts: u64, rec: &[u8], f: &WakingFormat) -> Result<(), ParseError> {
        if rec.len() < f.size {
            return Err(ParseError::ShortCompactEvent);
        }
        let (pid, cpu, prio) = (
            i32_at(rec, f.pid)?,
            i32_at(rec, f.target_cpu)?,
            i32_at(rec, f.prio)?,
        );
        let flags = read_uint(rec, f.common_flags, 1).ok_or(ParseError::ShortCompactEvent)?;
        let comm = self.intern(comm_at(rec, f.comm)?);
        self.wk_ts.push(ts.wrapping_sub(self.wk_last_ts));
        self.wk_last_ts = ts;
        self.wk_pid.push(pid);
        self.wk_target_cpu.push(cpu);
        self.wk_prio.push(prio);
        self.wk_comm.push(comm);
        self.wk_flags.push(flags as u32);
        Ok(())
    }

    /// Writes `compact_sched` into the open bundle (if anything is held)
    /// and empties the buffer.
    pub fn write_and_reset(&mut self, s: &mut PacketBuf) {
        if !self.is_empty() {
            let n = s.begin(BUNDLE_COMPACT_SCHED);
            for &c in &self.intern {
                let (name, len) = comm_name(c);
                s.bytes(5, &name[..len]);
            }
            if !self.sw_ts.is_empty() {
                s.packed_varints(1, self.sw_ts.iter().copied());
                s.packed_varints(2, self.sw_prev_state.iter().map(|&x| x as u64));
                s.packed_varints(3, i(&self.sw_next_pid));
                s.packed_varints(4, i(&self.sw_next_prio));
                s.packed_varints(6, u(&self.sw_next_comm));
            }
            if !self.wk_ts.is_empty() {
                s.packed_varints(7, self.wk_ts.iter().copied());
                s.packed_varints(8, i(&self.wk_pid));
                s.packed_varints(9, i(&self.wk_target_cpu));
                s.packed_varints(10, i(&self.wk_prio));
                s.packed_varints(11, u(&self.wk_comm));
                s.packed_varints(12, u(&self.wk_flags));
            }
            s.end(n);
        }
        self.reset();
    }

    pub fn reset(&mut self) {
        // Keep the allocations.
        self.intern.clear();
        self.intern_index.fill(0);
        self.sw_last_ts = 0;
        self.wk_last_ts = 0;
        self.sw_ts.clear();
        self.sw_prev_state.clear();
        self.sw_next_pid.clear();
        self.sw_next_prio.clear();
        self.sw_next_comm.clear();
        self.wk_ts.clear();
        self.wk_pid.clear();
        self.wk_target_cpu.clear();
        self.wk_prio.clear();
        self.wk_comm.clear();
        self.wk_flags.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comm(b: &[u8]) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[..b.len()].copy_from_slice(b);
        c
    }

    #[test]
    fn comm_keys_ignore_bytes_after_the_nul() {
        let mut stale = comm(b"sh\0old-name-xyz");
        assert_eq!(comm_key(&stale), comm_key(&comm(b"sh")));
        stale[2] = b'!';
        assert_ne!(comm_key(&stale), comm_key(&comm(b"sh")));
        // A NUL right after bytes whose subtraction borrows (0x01, 0x80).
        assert_eq!(
            comm_key(&comm(b"\x01\x80")),
            comm_key(&comm(b"\x01\x80\0\x01"))
        );
        assert_eq!(comm_key(&[0u8; 16]), 0);
    }

    #[test]
    fn comm_names_round_trip_at_every_length() {
        let full = *b"0123456789abcdef";
        for len in 0..=16 {
            let mut c = comm(&full[..len]);
            if len < 15 {
                c[len + 1] = b'x'; // stale byte after the NUL
            }
            let (name, n) = comm_name(comm_key(&c));
            assert_eq!(&name[..n], &full[..len], "len {len}");
        }
        // Bytes >= 0x80 (UTF-8 names) survive too.
        let (name, n) = comm_name(comm_key(&comm("zü".as_bytes())));
        assert_eq!(&name[..n], "zü".as_bytes());
    }

    #[test]
    fn interning_reuses_equal_names() {
        let mut b = CompactSchedBuffer::default();
        assert_eq!(b.intern(&comm(b"a")), 0);
        assert_eq!(b.intern(&comm(b"bb")), 1);
        assert_eq!(b.intern(&comm(b"a\0junk")), 0);
        assert_eq!(b.interned(), 2);
        // More names than hash slots: every one keeps its first index,
        // through collisions and after its slot was taken by another.
        let names: Vec<[u8; 16]> = (0..1000u32)
            .map(|n| comm(n.to_string().as_bytes()))
            .collect();
        for (i, c) in names.iter().enumerate() {
            assert_eq!(b.intern(c), i as u32 + 2);
        }
        for (i, c) in names.iter().enumerate().rev() {
            assert_eq!(b.intern(c), i as u32 + 2);
        }
        assert_eq!(b.intern(&comm(b"bb")), 1);
        b.reset();
        assert_eq!(b.intern(&comm(b"bb")), 0, "a reset forgets every name");
    }
}

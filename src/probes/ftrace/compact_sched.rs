//! Compact encoding of sched_switch / sched_waking
//! (`FtraceEventBundle.compact_sched`): parallel packed arrays, delta-coded
//! timestamps and an intern table of comms. Used only when the kernel's
//! formats look as expected; otherwise the events are written in full.

use super::format::{EventFormat, FieldType};
use super::page_parser::ParseError;
use super::translate::{read_int, read_uint, until_nul};
use crate::protozero::{begin_nested, end_nested, put_bytes, put_packed_varints, Stream};

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
            &["prev_state", "next_pid", "next_prio", "next_comm"],
        ),
        prev_state: (state.offset as usize, state.size as usize),
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

/// Events of one bundle, waiting to be written.
#[derive(Debug, Default)]
pub struct CompactSchedBuffer {
    intern: Vec<Vec<u8>>,
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
    read_int(rec, off, 4)
        .map(|v| v as i32)
        .ok_or(ParseError::ShortCompactEvent)
}

impl CompactSchedBuffer {
    fn intern(&mut self, comm: &[u8]) -> u32 {
        let comm = until_nul(comm);
        if let Some(i) = self.intern.iter().position(|c| c == comm) {
            return i as u32;
        }
        self.intern.push(comm.to_vec());
        (self.intern.len() - 1) as u32
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
        let comm = rec
            .get(f.next_comm..f.next_comm + 16)
            .ok_or(ParseError::ShortCompactEvent)?;
        let comm = self.intern(comm);
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
        let comm = rec
            .get(f.comm..f.comm + 16)
            .ok_or(ParseError::ShortCompactEvent)?;
        let comm = self.intern(comm);
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
    pub fn write_and_reset<S: Stream + ?Sized>(&mut self, s: &mut S) {
        if !self.is_empty() {
            let n = begin_nested(s, BUNDLE_COMPACT_SCHED);
            for c in &self.intern {
                put_bytes(s, 5, c);
            }
            let i = |v: &Vec<i32>| v.iter().map(|&x| x as i64 as u64).collect::<Vec<_>>();
            if !self.sw_ts.is_empty() {
                put_packed_varints(s, 1, self.sw_ts.iter().copied());
                put_packed_varints(s, 2, self.sw_prev_state.iter().map(|&x| x as u64));
                put_packed_varints(s, 3, i(&self.sw_next_pid));
                put_packed_varints(s, 4, i(&self.sw_next_prio));
                put_packed_varints(s, 6, self.sw_next_comm.iter().map(|&x| x as u64));
            }
            if !self.wk_ts.is_empty() {
                put_packed_varints(s, 7, self.wk_ts.iter().copied());
                put_packed_varints(s, 8, i(&self.wk_pid));
                put_packed_varints(s, 9, i(&self.wk_target_cpu));
                put_packed_varints(s, 10, i(&self.wk_prio));
                put_packed_varints(s, 11, self.wk_comm.iter().map(|&x| x as u64));
                put_packed_varints(s, 12, self.wk_flags.iter().map(|&x| x as u64));
            }
            end_nested(s, n);
        }
        self.reset();
    }

    pub fn reset(&mut self) {
        // Keep the allocations.
        self.intern.clear();
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

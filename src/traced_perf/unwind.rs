//! User stacks from a sample's copied registers and stack bytes:
//! `UNWIND_FRAME_POINTER` walks the frame-pointer chain through the copy,
//! `UNWIND_DWARF` evaluates `.eh_frame` CFI with `framehop` (x86_64 and
//! aarch64; armv7 has no `.eh_frame`, ARM EHABI instead, and walks frame
//! pointers). Pure code over the sample's bytes: memory outside the copy is
//! never read, every walk is bounded by [`MAX_FRAMES`], and what stopped a
//! walk early is an [`UnwindError`] (upstream's StackUnwindError).

/// Frames of one user stack at most (upstream's unwinder limit).
pub const MAX_FRAMES: usize = 1000;

/// Profiling.StackUnwindError values upstream writes in PerfSample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnwindError {
    /// A read outside the copied stack (the copy was cut, or a garbage
    /// pointer).
    MemoryInvalid = 2,
    /// Unwind info was there but could not be used.
    UnwindInfo = 3,
    /// The pc is in no mapping of the process.
    InvalidMap = 5,
    MaxFramesExceeded = 6,
    /// The walk did not move (a loop).
    RepeatedFrame = 7,
    /// The sample has no user registers (a kernel thread).
    BadArch = 12,
}

impl UnwindError {
    /// The synthetic caller frame upstream appends: "ERROR <name>".
    pub fn frame_name(self) -> &'static str {
        match self {
            UnwindError::MemoryInvalid => "ERROR MEMORY_INVALID",
            UnwindError::UnwindInfo => "ERROR UNWIND_INFO",
            UnwindError::InvalidMap => "ERROR INVALID_MAP",
            UnwindError::MaxFramesExceeded => "ERROR MAX_FRAMES_EXCEEDED",
            UnwindError::RepeatedFrame => "ERROR REPEATED_FRAME",
            UnwindError::BadArch => "ERROR BAD_ARCH",
        }
    }
}

/// The registers an unwinder starts from.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct UserRegs {
    pub pc: u64,
    pub sp: u64,
    pub fp: u64,
    /// aarch64/armv7 link register (0 on x86_64).
    pub lr: u64,
}

// sample_regs_user bits (arch/*/include/uapi/asm/perf_regs.h); a sample
// carries the asked registers in bit order.
#[cfg(target_arch = "x86_64")]
mod arch {
    /// BP (6), SP (7), IP (8).
    pub const REGS_MASK: u64 = (1 << 6) | (1 << 7) | (1 << 8);
    pub const WORD: usize = 8;
    pub fn regs(r: &[u64]) -> Option<super::UserRegs> {
        let [fp, sp, pc] = r.try_into().ok()?;
        Some(super::UserRegs { pc, sp, fp, lr: 0 })
    }
}
#[cfg(target_arch = "aarch64")]
mod arch {
    /// X29 (fp), LR, SP, PC.
    pub const REGS_MASK: u64 = 0xf << 29;
    pub const WORD: usize = 8;
    pub fn regs(r: &[u64]) -> Option<super::UserRegs> {
        let [fp, lr, sp, pc] = r.try_into().ok()?;
        Some(super::UserRegs { pc, sp, fp, lr })
    }
}
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
mod arch {
    /// ARM: R7 (Thumb fp), R11 (ARM fp), SP (13), LR (14), PC (15).
    pub const REGS_MASK: u64 = (1 << 7) | (1 << 11) | (1 << 13) | (1 << 14) | (1 << 15);
    pub const WORD: usize = 4;
    pub fn regs(r: &[u64]) -> Option<super::UserRegs> {
        let [r7, r11, sp, lr, pc] = r.try_into().ok()?;
        // Thumb code (pc bit 0 is not kept; the kernel reports CPSR apart)
        // keeps its frame in r7; gcc's ARM code in r11. Take the one that
        // points into the stack above sp.
        let fp = if r11 > sp { r11 } else { r7 };
        Some(super::UserRegs { pc, sp, fp, lr })
    }
}

pub use arch::{REGS_MASK, WORD};

/// Registers in [`REGS_MASK`].
pub const REGS_COUNT: usize = REGS_MASK.count_ones() as usize;

/// The sample's registers, if it has them (a kernel thread has none).
pub fn user_regs(regs: &[u64]) -> Option<UserRegs> {
    arch::regs(regs)
}

/// The copied stack: `bytes` are the memory from `sp` up.
#[derive(Clone, Copy)]
pub struct StackCopy<'a> {
    pub sp: u64,
    pub bytes: &'a [u8],
}

impl StackCopy<'_> {
    /// The word at `addr`, when the copy holds it.
    pub fn word(&self, addr: u64) -> Option<u64> {
        let off = usize::try_from(addr.checked_sub(self.sp)?).ok()?;
        let b = self.bytes.get(off..off.checked_add(WORD)?)?;
        Some(if WORD == 8 {
            u64::from_ne_bytes(b.try_into().ok()?)
        } else {
            u32::from_ne_bytes(b.try_into().ok()?) as u64
        })
    }
}

/// UNWIND_FRAME_POINTER: from the sampled pc, each frame record
/// `[fp] = caller's fp, [fp + WORD] = return address` (x86_64 after
/// `push rbp; mov rbp, rsp`, AAPCS64 and AAPCS32 frame records alike),
/// read from the copy only. Pushes pcs leaf first into `out`.
pub fn frame_pointer_walk(
    regs: UserRegs,
    stack: StackCopy<'_>,
    out: &mut Vec<u64>,
) -> Option<UnwindError> {
    out.push(regs.pc);
    let mut fp = regs.fp;
    let mut last = regs.sp;
    loop {
        if out.len() >= MAX_FRAMES {
            return Some(UnwindError::MaxFramesExceeded);
        }
        if fp == 0 {
            return None;
        }
        // Frames live above the last one; alignment rules out garbage.
        if fp < last || !fp.is_multiple_of(WORD as u64) {
            return Some(UnwindError::RepeatedFrame);
        }
        let (Some(next_fp), Some(ret)) = (stack.word(fp), stack.word(fp + WORD as u64)) else {
            return Some(UnwindError::MemoryInvalid);
        };
        if ret == 0 {
            return None;
        }
        out.push(ret);
        last = fp + 2 * WORD as u64;
        if next_fp != 0 && next_fp <= fp {
            return Some(UnwindError::RepeatedFrame);
        }
        fp = next_fp;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(sp: u64, words: &[u64]) -> Vec<u8> {
        let mut b = Vec::new();
        for w in words {
            if WORD == 8 {
                b.extend_from_slice(&w.to_ne_bytes());
            } else {
                b.extend_from_slice(&(*w as u32).to_ne_bytes());
            }
        }
        let _ = sp;
        b
    }

    #[test]
    fn frame_pointer_walk_follows_records_to_the_root() {
        let w = WORD as u64;
        let sp = 0x1000;
        // [sp+0]: local; frame A at sp+w: (fp B, ret 0x22); frame B at
        // sp+3w: (0, ret 0x33).
        let bytes = stack(sp, &[7, sp + 3 * w, 0x22, 0, 0x33]);
        let regs = UserRegs {
            pc: 0x11,
            sp,
            fp: sp + w,
            lr: 0,
        };
        let mut out = Vec::new();
        let err = frame_pointer_walk(regs, StackCopy { sp, bytes: &bytes }, &mut out);
        assert_eq!(err, None);
        assert_eq!(out, vec![0x11, 0x22, 0x33]);
    }

    #[test]
    fn frame_pointer_walk_stops_at_the_copy_and_at_loops() {
        let w = WORD as u64;
        let sp = 0x1000;
        let regs = UserRegs {
            pc: 0x11,
            sp,
            fp: sp,
            lr: 0,
        };
        // Chain leaves the copy.
        let bytes = stack(sp, &[sp + 100 * w, 0x22]);
        let mut out = Vec::new();
        let err = frame_pointer_walk(regs, StackCopy { sp, bytes: &bytes }, &mut out);
        assert_eq!(err, Some(UnwindError::MemoryInvalid));
        assert_eq!(out, vec![0x11, 0x22]);
        // Chain points at itself.
        let bytes = stack(sp, &[sp, 0x22]);
        out.clear();
        let err = frame_pointer_walk(regs, StackCopy { sp, bytes: &bytes }, &mut out);
        assert_eq!(err, Some(UnwindError::RepeatedFrame));
    }
}

//! traced_perf's unwinder inputs: an ELF's unwind sections (`.eh_frame`,
//! `.eh_frame_hdr`, read by elf::unwind_sections and evaluated by
//! framehop) and a sample's copied stack and registers, walked with
//! UNWIND_DWARF (reading on past the copy from pages made of the stack's
//! bytes, as it reads /proc/PID/mem) and UNWIND_FRAME_POINTER. Input: a
//! little-endian u16 length of the ELF bytes, the ELF, then the stack (its
//! first three words pick pc, fp and lr). Errors, never panics; walks and
//! pages read past the copy stay bounded.

use tracebox::traced_perf::{dwarf, elf, far_stack, unwind};

const CODE: u64 = 0x10000;
const SP: u64 = 0x7000_0000;

pub fn run(data: &[u8]) {
    let Some((len, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let (elf_bytes, stack) = rest.split_at((u16::from_le_bytes(*len) as usize).min(rest.len()));
    let sections = elf::unwind_sections(elf_bytes, 1 << 20).unwrap_or_default();
    let module = dwarf::ModuleSpec {
        name: "fuzz",
        avma: CODE..CODE + 0x10000,
        base_avma: CODE,
        sections: &sections,
    };
    let u = dwarf::ProcessUnwinder::new(std::iter::once(module));
    let word = |i: usize| {
        stack
            .get(i * 8..i * 8 + 8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()))
    };
    let regs = unwind::UserRegs {
        pc: CODE + word(0) % 0x10000,
        sp: SP,
        fp: SP + word(1) % 0x20000,
        lr: CODE + word(2) % 0x10000,
    };
    let copy = unwind::StackCopy {
        sp: SP,
        bytes: stack,
    };
    let mut out = Vec::new();
    let mut cache = dwarf::Cache::default();
    let mut far = far_stack::FarStack::default();
    far.reset(SP, stack.len());
    let mut read_page = |page: u64, buf: &mut [u8]| {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = stack
                .get((page as usize + i) % stack.len().max(1))
                .copied()
                .unwrap_or(0);
        }
        true
    };
    let mut far_word = |addr: u64| far.word(addr, unwind::WORD, &mut read_page);
    let _ = u.unwind(&mut cache, regs, copy, &mut far_word, &mut out);
    assert!(out.len() <= unwind::MAX_FRAMES);
    assert!(far.pages_read() <= far_stack::MAX_PAGES);
    out.clear();
    let _ = unwind::frame_pointer_walk(regs, copy, &mut out);
    assert!(out.len() <= unwind::MAX_FRAMES);
}

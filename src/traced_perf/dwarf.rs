//! UNWIND_DWARF: one process's modules (its executable mappings with their
//! files' `.eh_frame`) in a `framehop` unwinder, walked over a sample's
//! copied stack. Where a pc has no CFI framehop falls back to the frame
//! pointer, as upstream's libunwindstack does. armv7 (no `.eh_frame`)
//! walks frame pointers only.

use std::ops::Range;

use super::elf::UnwindSections;
use super::unwind::{StackCopy, UnwindError, UserRegs};

/// One executable mapping: its addresses, where ELF address 0 sits, and
/// its file's sections.
pub struct ModuleSpec<'a> {
    pub name: &'a str,
    pub avma: Range<u64>,
    pub base_avma: u64,
    pub sections: &'a UnwindSections,
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod imp {
    use std::sync::Arc;

    use framehop::{
        CacheNative, ExplicitModuleSectionInfo, FrameAddress, MayAllocateDuringUnwind, Module,
        Unwinder, UnwinderNative,
    };

    use super::*;
    use crate::traced_perf::unwind::MAX_FRAMES;

    /// The rule cache, shared by every process (framehop keys it by
    /// module generation).
    pub struct Cache(Box<CacheNative<MayAllocateDuringUnwind>>);

    impl Default for Cache {
        fn default() -> Cache {
            Cache(Box::new(CacheNative::new()))
        }
    }

    pub struct ProcessUnwinder {
        unwinder: UnwinderNative<Arc<[u8]>, MayAllocateDuringUnwind>,
    }

    impl ProcessUnwinder {
        pub fn new<'a>(modules: impl Iterator<Item = ModuleSpec<'a>>) -> ProcessUnwinder {
            let mut unwinder = UnwinderNative::new();
            for m in modules {
                let s = m.sections;
                let info = ExplicitModuleSectionInfo {
                    base_svma: 0,
                    text_svma: s.text.clone(),
                    got_svma: s.got.clone(),
                    eh_frame_svma: s.eh_frame.as_ref().map(|e| e.0.clone()),
                    eh_frame: s.eh_frame.as_ref().map(|e| e.1.clone()),
                    eh_frame_hdr_svma: s.eh_frame_hdr.as_ref().map(|e| e.0.clone()),
                    eh_frame_hdr: s.eh_frame_hdr.as_ref().map(|e| e.1.clone()),
                    ..Default::default()
                };
                unwinder.add_module(Module::new(
                    m.name.to_string(),
                    m.avma.clone(),
                    m.base_avma,
                    info,
                ));
            }
            ProcessUnwinder { unwinder }
        }

        /// Pushes pcs (leaf first; return addresses as they are) into `out`.
        /// Words past the copy come from `far` (the process's memory).
        pub fn unwind(
            &self,
            cache: &mut Cache,
            regs: UserRegs,
            stack: StackCopy<'_>,
            far: &mut dyn FnMut(u64) -> Option<u64>,
            out: &mut Vec<u64>,
        ) -> Option<UnwindError> {
            #[cfg(target_arch = "x86_64")]
            let uregs = framehop::x86_64::UnwindRegsX86_64::new(regs.pc, regs.sp, regs.fp);
            #[cfg(target_arch = "aarch64")]
            let uregs = framehop::aarch64::UnwindRegsAarch64::new_with_ptr_auth_mask(
                framehop::aarch64::PtrAuthMask::from_max_known_address(
                    self.unwinder.max_known_code_address(),
                ),
                regs.lr,
                regs.sp,
                regs.fp,
            );
            let mut read = |addr: u64| stack.word(addr).or_else(|| far(addr)).ok_or(());
            let mut it = self
                .unwinder
                .iter_frames(regs.pc, uregs, &mut cache.0, &mut read);
            loop {
                if out.len() >= MAX_FRAMES {
                    return Some(UnwindError::MaxFramesExceeded);
                }
                match it.next() {
                    Ok(Some(FrameAddress::InstructionPointer(pc))) => out.push(pc),
                    Ok(Some(FrameAddress::ReturnAddress(ra))) => out.push(ra.get()),
                    Ok(None) => return None,
                    Err(framehop::Error::CouldNotReadStack(_)) => {
                        return Some(UnwindError::MemoryInvalid)
                    }
                    Err(
                        framehop::Error::DidNotAdvance
                        | framehop::Error::FramepointerUnwindingMovedBackwards,
                    ) => return Some(UnwindError::RepeatedFrame),
                    Err(_) => return Some(UnwindError::UnwindInfo),
                }
            }
        }
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
mod imp {
    use super::*;

    #[derive(Default)]
    pub struct Cache;

    /// armv7: the frame-pointer walk (no `.eh_frame` to read).
    pub struct ProcessUnwinder;

    impl ProcessUnwinder {
        pub fn new<'a>(_modules: impl Iterator<Item = ModuleSpec<'a>>) -> ProcessUnwinder {
            ProcessUnwinder
        }

        pub fn unwind(
            &self,
            _cache: &mut Cache,
            regs: UserRegs,
            stack: StackCopy<'_>,
            _far: &mut dyn FnMut(u64) -> Option<u64>,
            out: &mut Vec<u64>,
        ) -> Option<UnwindError> {
            super::super::unwind::frame_pointer_walk(regs, stack, out)
        }
    }
}

pub use imp::{Cache, ProcessUnwinder};

/// Reads DWARF unwind sections on this architecture.
pub const HAS_DWARF: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

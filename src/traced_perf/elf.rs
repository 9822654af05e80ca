//! What traced_perf needs from an ELF file: the GNU build id (notes), the
//! load bias of the executable segment, and function symbols from
//! `.symtab` / `.dynsym`. Pure code: bytes come through [`ReadAt`], and
//! every offset and size read from the file is checked (files are
//! untrusted: any process can map anything).

/// Random access to a file's bytes.
pub trait ReadAt {
    /// Exactly `len` bytes at `off`, or `None`.
    fn read_at(&self, off: u64, len: usize) -> Option<Vec<u8>>;
}

impl ReadAt for [u8] {
    fn read_at(&self, off: u64, len: usize) -> Option<Vec<u8>> {
        let off = usize::try_from(off).ok()?;
        Some(self.get(off..off.checked_add(len)?)?.to_vec())
    }
}

/// Biggest symbol or string table we read from one file.
pub const MAX_TABLE_BYTES: usize = 32 << 20;
const MAX_HEADERS: usize = 4096;
const MAX_NOTE_BYTES: usize = 64 << 10;

/// Function symbols, sorted by address; names in one buffer.
#[derive(Debug, Default)]
pub struct Symbols {
    /// (address, size, end of the name in `names`).
    entries: Vec<(u64, u64, u32)>,
    names: String,
}

impl Symbols {
    /// The function containing `vaddr` (a zero-sized symbol covers up to
    /// the next one).
    pub fn lookup(&self, vaddr: u64) -> Option<&str> {
        let i = self
            .entries
            .partition_point(|e| e.0 <= vaddr)
            .checked_sub(1)?;
        let (addr, size, end) = self.entries[i];
        if size != 0 && vaddr >= addr.saturating_add(size) {
            return None;
        }
        let start = if i == 0 { 0 } else { self.entries[i - 1].2 } as usize;
        self.names.get(start..end as usize)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn mem_bytes(&self) -> usize {
        self.entries.capacity() * 24 + self.names.capacity()
    }
}

#[derive(Debug, Default)]
pub struct ElfInfo {
    pub build_id: Vec<u8>,
    /// p_vaddr - p_offset of the first executable PT_LOAD.
    pub load_bias: u64,
    pub symbols: Symbols,
}

struct Layout {
    is64: bool,
}

impl Layout {
    fn word(&self, b: &[u8], off32: usize, off64: usize) -> Option<u64> {
        if self.is64 {
            Some(u64::from_le_bytes(
                b.get(off64..off64 + 8)?.try_into().ok()?,
            ))
        } else {
            Some(u32::from_le_bytes(b.get(off32..off32 + 4)?.try_into().ok()?) as u64)
        }
    }
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(off..off + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

/// Reads a table of `num` entries of `entsize` bytes at `off`.
fn table(f: &(impl ReadAt + ?Sized), off: u64, entsize: usize, num: usize) -> Option<Vec<u8>> {
    let len = entsize.checked_mul(num)?;
    if len > MAX_TABLE_BYTES {
        return None;
    }
    f.read_at(off, len)
}

/// Parses a little-endian ELF32/ELF64 file. `None` if it is not one;
/// missing parts (no notes, stripped symbols) leave fields empty.
pub fn parse(f: &(impl ReadAt + ?Sized), want_symbols: bool) -> Option<ElfInfo> {
    let h = f.read_at(0, 64).or_else(|| f.read_at(0, 52))?;
    if h.get(..4)? != b"\x7fELF" || h[5] != 1 {
        return None;
    }
    let l = Layout { is64: h[4] == 2 };
    let phoff = l.word(&h, 28, 32)?;
    let shoff = l.word(&h, 32, 40)?;
    let (pe, pn, se, sn) = if l.is64 {
        (
            u16_at(&h, 54)?,
            u16_at(&h, 56)?,
            u16_at(&h, 58)?,
            u16_at(&h, 60)?,
        )
    } else {
        (
            u16_at(&h, 42)?,
            u16_at(&h, 44)?,
            u16_at(&h, 46)?,
            u16_at(&h, 48)?,
        )
    };
    let (phsize, shsize) = if l.is64 { (56, 64) } else { (32, 40) };
    let mut info = ElfInfo::default();
    if (pe as usize) >= phsize && (pn as usize) <= MAX_HEADERS {
        let ph = table(f, phoff, pe as usize, pn as usize).unwrap_or_default();
        let mut bias_set = false;
        for p in ph.chunks_exact(pe as usize) {
            let ty = u32_at(p, 0)?;
            let flags = if l.is64 {
                u32_at(p, 4)?
            } else {
                u32_at(p, 24)?
            };
            let off = l.word(p, 4, 8)?;
            let vaddr = l.word(p, 8, 16)?;
            let filesz = l.word(p, 16, 32)?;
            if ty == 1 && flags & 1 != 0 && !bias_set {
                info.load_bias = vaddr.wrapping_sub(off);
                bias_set = true;
            }
            if ty == 4 && info.build_id.is_empty() && filesz as usize <= MAX_NOTE_BYTES {
                if let Some(notes) = f.read_at(off, filesz as usize) {
                    info.build_id = build_id(&notes).unwrap_or_default();
                }
            }
        }
    }
    if !want_symbols || (se as usize) < shsize || (sn as usize) > MAX_HEADERS {
        return Some(info);
    }
    let sh = table(f, shoff, se as usize, sn as usize).unwrap_or_default();
    let section = |i: usize| sh.get(i * se as usize..(i + 1) * se as usize);
    let mut rows: Vec<(u64, u64, Vec<u8>)> = Vec::new();
    // .symtab first (complete); .dynsym only when there is no .symtab.
    for want in [2u32, 11] {
        if !rows.is_empty() {
            break;
        }
        for i in 0..sn as usize {
            let s = section(i)?;
            if u32_at(s, 4)? != want {
                continue;
            }
            let off = l.word(s, 16, 24)?;
            let size = l.word(s, 20, 32)? as usize;
            let link = if l.is64 {
                u32_at(s, 40)?
            } else {
                u32_at(s, 24)?
            } as usize;
            let Some(strs) = section(link) else { continue };
            let str_off = l.word(strs, 16, 24)?;
            let str_size = l.word(strs, 20, 32)? as usize;
            if size > MAX_TABLE_BYTES || str_size > MAX_TABLE_BYTES {
                continue;
            }
            let (Some(syms), Some(strtab)) = (f.read_at(off, size), f.read_at(str_off, str_size))
            else {
                continue;
            };
            collect_functions(&l, &syms, &strtab, &mut rows);
        }
    }
    rows.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    rows.dedup_by_key(|r| r.0);
    for (addr, size, name) in rows {
        let Ok(name) = std::str::from_utf8(&name) else {
            continue;
        };
        if info.symbols.names.len() + name.len() > u32::MAX as usize {
            break;
        }
        info.symbols.names.push_str(name);
        info.symbols
            .entries
            .push((addr, size, info.symbols.names.len() as u32));
    }
    Some(info)
}

/// The bytes of the symbol and string tables [`parse`] may read: what
/// parsing the file costs (0 when it is no ELF).
pub fn symbol_table_bytes(f: &(impl ReadAt + ?Sized)) -> u64 {
    let Some(h) = f.read_at(0, 64) else { return 0 };
    if h.get(..4) != Some(b"\x7fELF") || h[5] != 1 || h[4] != 2 {
        // ELF32 tables are small enough to read on the spot.
        return 0;
    }
    let l = Layout { is64: true };
    let (Some(shoff), Some(se), Some(sn)) = (l.word(&h, 32, 40), u16_at(&h, 58), u16_at(&h, 60))
    else {
        return 0;
    };
    if (se as usize) < 64 || (sn as usize) > MAX_HEADERS {
        return 0;
    }
    let sh = table(f, shoff, se as usize, sn as usize).unwrap_or_default();
    let size = |s: &[u8]| l.word(s, 20, 32).unwrap_or(0);
    let mut total = 0u64;
    for s in sh.chunks_exact(se as usize) {
        if matches!(u32_at(s, 4), Some(2 | 11)) {
            let link = u32_at(s, 40).unwrap_or(0) as usize;
            let strs = sh.get(link * se as usize..(link + 1) * se as usize);
            total = total
                .saturating_add(size(s))
                .saturating_add(strs.map_or(0, size));
        }
    }
    total
}

fn collect_functions(l: &Layout, syms: &[u8], strtab: &[u8], rows: &mut Vec<(u64, u64, Vec<u8>)>) {
    let esize = if l.is64 { 24 } else { 16 };
    for s in syms.chunks_exact(esize) {
        let (Some(name), Some(value), Some(size)) =
            (u32_at(s, 0), l.word(s, 4, 8), l.word(s, 8, 16))
        else {
            continue;
        };
        let info = if l.is64 { s[4] } else { s[12] };
        // STT_FUNC (2) or STT_GNU_IFUNC (10), defined (value != 0).
        if (info & 0xf != 2 && info & 0xf != 10) || value == 0 {
            continue;
        }
        let Some(tail) = strtab.get(name as usize..) else {
            continue;
        };
        let end = tail.iter().position(|&c| c == 0).unwrap_or(tail.len());
        if end == 0 {
            continue;
        }
        rows.push((value, size, tail[..end].to_vec()));
    }
}

/// The NT_GNU_BUILD_ID descriptor in a PT_NOTE segment.
pub fn build_id(notes: &[u8]) -> Option<Vec<u8>> {
    let mut rest = notes;
    let align = |n: usize| n.checked_add(3).map(|x| x & !3);
    while rest.len() >= 12 {
        let namesz = u32_at(rest, 0)? as usize;
        let descsz = u32_at(rest, 4)? as usize;
        let ty = u32_at(rest, 8)?;
        let name_end = 12usize.checked_add(align(namesz)?)?;
        let desc_end = name_end.checked_add(align(descsz)?)?;
        let name = rest.get(12..12usize.checked_add(namesz)?)?;
        if ty == 3 && name == b"GNU\0" {
            return Some(rest.get(name_end..name_end + descsz)?.to_vec());
        }
        rest = rest.get(desc_end..)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_test_binary() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let info = parse(&exe[..], true).unwrap();
        assert!(!info.build_id.is_empty(), "rustc links a build id");
        let _ = info.symbols.len();
    }

    #[test]
    fn note_walk() {
        let mut n = Vec::new();
        for (name, ty, desc) in [
            (&b"XY\0"[..], 1u32, &[1u8, 2][..]),
            (b"GNU\0", 3, &[9, 8, 7, 6, 5]),
        ] {
            n.extend_from_slice(&(name.len() as u32).to_le_bytes());
            n.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            n.extend_from_slice(&ty.to_le_bytes());
            n.extend_from_slice(name);
            n.resize(n.len().next_multiple_of(4), 0);
            n.extend_from_slice(desc);
            n.resize(n.len().next_multiple_of(4), 0);
        }
        assert_eq!(build_id(&n), Some(vec![9, 8, 7, 6, 5]));
        assert_eq!(build_id(&n[..20]), None);
    }

    #[test]
    fn mutated_headers_never_panic() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        // Headers, program headers and the start of the file: where the
        // offsets and counts the parser trusts least live.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..300 {
            let mut f = exe[..exe.len().min(1 << 16)].to_vec();
            for _ in 0..8 {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let at = (seed >> 33) as usize % 128;
                f[at] = (seed >> 17) as u8;
            }
            if let Some(info) = parse(&f[..], true) {
                let _ = info.symbols.lookup(seed);
            }
        }
    }

    #[test]
    fn symbol_table_bytes_is_what_parse_may_read() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        // A test binary's .symtab and .strtab: megabytes.
        assert!(symbol_table_bytes(&exe[..]) > 1 << 20);
        assert_eq!(symbol_table_bytes(&b"hello"[..]), 0);
        assert_eq!(symbol_table_bytes(&exe[..64]), 0);
    }

    #[test]
    fn garbage_is_not_elf() {
        assert!(parse(&b"hello"[..], true).is_none());
        let mut h = [0u8; 64];
        h[..6].copy_from_slice(b"\x7fELF\x02\x01");
        h[56] = 0xff;
        h[57] = 0xff;
        assert!(parse(&h[..], true).is_some());
    }
}

/// What DWARF unwinding needs from one file: `.eh_frame` (and its
/// `.eh_frame_hdr` index) with their addresses, and the `.text` / `.got`
/// ranges CFI may refer to. Sendable: the symbol loader's thread reads
/// big ones.
#[derive(Debug, Default, Clone)]
pub struct UnwindSections {
    pub eh_frame: Option<(std::ops::Range<u64>, std::sync::Arc<[u8]>)>,
    pub eh_frame_hdr: Option<(std::ops::Range<u64>, std::sync::Arc<[u8]>)>,
    pub text: Option<std::ops::Range<u64>>,
    pub got: Option<std::ops::Range<u64>>,
    /// The two tables' sizes as the headers give them, read or not (a
    /// `max_bytes` of 0 reads the headers only).
    pub table_bytes: u64,
}

impl UnwindSections {
    pub fn mem_bytes(&self) -> usize {
        self.eh_frame.as_ref().map_or(0, |s| s.1.len())
            + self.eh_frame_hdr.as_ref().map_or(0, |s| s.1.len())
    }
}

/// Finds the unwind sections of a little-endian ELF by their names. Each
/// section read is at most `max_bytes` (a bigger one is left out).
pub fn unwind_sections(f: &(impl ReadAt + ?Sized), max_bytes: usize) -> Option<UnwindSections> {
    let h = f.read_at(0, 64).or_else(|| f.read_at(0, 52))?;
    if h.get(..4)? != b"\x7fELF" || h[5] != 1 {
        return None;
    }
    let l = Layout { is64: h[4] == 2 };
    let shoff = l.word(&h, 32, 40)?;
    let (se, sn, shstrndx) = if l.is64 {
        (u16_at(&h, 58)?, u16_at(&h, 60)?, u16_at(&h, 62)?)
    } else {
        (u16_at(&h, 46)?, u16_at(&h, 48)?, u16_at(&h, 50)?)
    };
    let shsize = if l.is64 { 64 } else { 40 };
    if (se as usize) < shsize || (sn as usize) > MAX_HEADERS {
        return None;
    }
    let sh = table(f, shoff, se as usize, sn as usize)?;
    let section = |i: usize| sh.get(i * se as usize..(i + 1) * se as usize);
    let names_hdr = section(shstrndx as usize)?;
    let names_size = l.word(names_hdr, 20, 32)? as usize;
    if names_size > MAX_TABLE_BYTES {
        return None;
    }
    let names = f.read_at(l.word(names_hdr, 16, 24)?, names_size)?;
    let mut out = UnwindSections::default();
    for i in 0..sn as usize {
        let s = section(i)?;
        let name_off = u32_at(s, 0)? as usize;
        let Some(tail) = names.get(name_off..) else {
            continue;
        };
        let name = &tail[..tail.iter().position(|&c| c == 0).unwrap_or(tail.len())];
        let addr = l.word(s, 12, 16)?;
        let off = l.word(s, 16, 24)?;
        let size = l.word(s, 20, 32)?;
        let Some(range) = addr.checked_add(size).map(|end| addr..end) else {
            continue;
        };
        let data = || {
            let n = usize::try_from(size).ok().filter(|&n| n <= max_bytes)?;
            f.read_at(off, n).map(std::sync::Arc::from)
        };
        if matches!(name, b".eh_frame" | b".eh_frame_hdr") {
            out.table_bytes = out.table_bytes.saturating_add(size);
        }
        match name {
            b".eh_frame" => out.eh_frame = data().map(|d| (range, d)),
            b".eh_frame_hdr" => out.eh_frame_hdr = data().map(|d| (range, d)),
            b".text" => out.text = Some(range),
            b".got" => out.got = Some(range),
            _ => {}
        }
    }
    // framehop would binary-search a hostile table; without one it
    // indexes `.eh_frame` itself.
    if let (Some((hdr, bytes)), Some((eh, _))) = (&out.eh_frame_hdr, &out.eh_frame) {
        if !super::eh_frame_hdr::search_table_is_sound(hdr.start, bytes, eh) {
            out.eh_frame_hdr = None;
        }
    }
    Some(out)
}

//! Kernel symbol table from `/proc/kallsyms`, for `symbolize_ksyms`,
//! held compactly (about 4 bytes a symbol instead of 30+).
//!
//! Only text symbols (`t`/`T`) are kept: symbol fields of ftrace events
//! hold function addresses. The table means exactly what [`symbol_rows`]
//! gives (sorted by address, the first name of an address wins) looked up
//! as "the last symbol starting at or below the address"; the compact form
//! only stores it differently:
//!
//! * Kernels with function padding have a `__pfx_NAME` symbol 16 bytes
//!   before nearly every `NAME` (half of all symbols). Such a pair is one
//!   entry with a flag; lookups below `NAME` give `__pfx_NAME` back.
//! * Entries go in blocks of [`BLOCK`]: each block is its address deltas
//!   and names, deflated. A lookup binary-searches the blocks' first
//!   addresses and inflates one block (kept for the next lookup: interned
//!   addresses come in clusters).
//!
//! Lookups happen once per new address of a sequence (interning), not per
//! event, so inflating a few KiB there costs little.

use std::cell::{OnceCell, RefCell};

/// Entries per deflated block: 64 cost 10 % more memory than 128 on a
/// 6.18 kernel, 256 only 6 % less for twice the work per lookup.
const BLOCK: usize = 128;
/// Longest name kept (the kernel's KSYM_NAME_LEN is 512).
const MAX_NAME: usize = 512;
const PFX: &[u8] = b"__pfx_";
/// How far a `__pfx_` symbol sits before its function.
const PFX_GAP: u64 = 16;
/// Ends a name in a block; [`END_PFX`] also says "with a `__pfx_` twin".
const END: u8 = 0;
const END_PFX: u8 = 1;

/// The text symbols of kallsyms text, sorted by address, one per address
/// (the first in file order): what the table answers from. Lines that do
/// not parse, zero addresses (kptr_restrict), non-text symbols and names
/// with control bytes, invalid UTF-8 or over [`MAX_NAME`] bytes are
/// skipped. A trailing `[module]` is not part of the name.
pub fn symbol_rows(text_untrusted: &[u8]) -> Vec<(u64, &str)> {
    let mut rows: Vec<(u64, &str)> = Vec::new();
    for line in text_untrusted.split(|&b| b == b'\n') {
        let mut it = line
            .split(|b| b.is_ascii_whitespace())
            .filter(|f| !f.is_empty());
        let (Some(a), Some(t), Some(name)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if t != b"t" && t != b"T" {
            continue;
        }
        if name.len() > MAX_NAME || name.iter().any(|&b| b < 0x20) {
            continue;
        }
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        let addr = std::str::from_utf8(a)
            .ok()
            .and_then(|a| u64::from_str_radix(a, 16).ok());
        match addr {
            Some(addr) if addr != 0 => rows.push((addr, name)),
            _ => {}
        }
    }
    // Stable: among equal addresses the first line stays.
    rows.sort_by_key(|r| r.0);
    rows.dedup_by_key(|r| r.0);
    rows
}

/// The naive lookup over [`symbol_rows`] (for tests and fuzzing).
pub fn rows_lookup<'a>(rows: &[(u64, &'a str)], addr: u64) -> Option<&'a str> {
    let i = rows.partition_point(|r| r.0 <= addr).checked_sub(1)?;
    Some(rows[i].1)
}

/// The last block inflated.
#[derive(Debug, Default)]
struct Inflated {
    block: Option<usize>,
    bytes: Vec<u8>,
}

/// Sorted address → name table, compact (see the module doc).
#[derive(Debug, Default)]
pub struct KernelSymbols {
    /// Symbols as kallsyms lists them (both of a `__pfx_` pair count).
    count: usize,
    /// First address of each block.
    firsts: Vec<u64>,
    /// Where each block starts in `deflated` (it ends where the next one
    /// starts).
    offsets: Vec<u32>,
    deflated: Vec<u8>,
    /// Size of the largest inflated block.
    max_block: usize,
    cache: RefCell<Inflated>,
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(b: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*pos)?;
        *pos += 1;
        v |= ((byte & 0x7f) as u64) << shift;
        if byte < 0x80 {
            return Some(v);
        }
    }
    None
}

impl KernelSymbols {
    /// Parses kallsyms text (`ADDR TYPE NAME [\[module\]]` per line); see
    /// [`symbol_rows`] for what is kept.
    pub fn parse(text_untrusted: &[u8]) -> KernelSymbols {
        Self::from_rows(&symbol_rows(text_untrusted))
    }

    /// Builds the table from rows sorted by address, one per address.
    pub fn from_rows(rows: &[(u64, &str)]) -> KernelSymbols {
        // Entries: (start, name, has a __pfx_ twin at start).
        let mut entries: Vec<(u64, &str, bool)> = Vec::with_capacity(rows.len());
        let mut i = 0;
        while i < rows.len() {
            let (addr, name) = rows[i];
            let twin = rows.get(i + 1).is_some_and(|&(next, next_name)| {
                name.as_bytes().strip_prefix(PFX) == Some(next_name.as_bytes())
                    && addr.checked_add(PFX_GAP) == Some(next)
            });
            if twin {
                entries.push((addr, rows[i + 1].1, true));
                i += 2;
            } else {
                entries.push((addr, name, false));
                i += 1;
            }
        }
        let mut k = KernelSymbols {
            count: rows.len(),
            ..Default::default()
        };
        let mut raw = Vec::new();
        for block in entries.chunks(BLOCK) {
            raw.clear();
            let mut prev = block[0].0;
            for &(start, name, twin) in block {
                put_varint(&mut raw, start - prev);
                raw.extend_from_slice(name.as_bytes());
                raw.push(if twin { END_PFX } else { END });
                prev = start;
            }
            if k.deflated.len() > u32::MAX as usize {
                break;
            }
            k.firsts.push(block[0].0);
            k.offsets.push(k.deflated.len() as u32);
            k.deflated
                .extend_from_slice(&miniz_oxide::deflate::compress_to_vec(&raw, 9));
            k.max_block = k.max_block.max(raw.len());
        }
        k.firsts.shrink_to_fit();
        k.offsets.shrink_to_fit();
        k.deflated.shrink_to_fit();
        k
    }

    /// Symbols kallsyms listed (after filtering), as upstream counts them.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Heap bytes held, the inflated block included.
    pub fn mem_bytes(&self) -> usize {
        self.firsts.capacity() * 8
            + self.offsets.capacity() * 4
            + self.deflated.capacity()
            + self.cache.borrow().bytes.capacity()
    }

    /// The name of the symbol containing `addr` (the last one starting at
    /// or below it), written into `out`.
    pub fn lookup_into<'o>(&self, addr: u64, out: &'o mut String) -> Option<&'o str> {
        out.clear();
        let b = self.firsts.partition_point(|&f| f <= addr).checked_sub(1)?;
        let mut cache = self.cache.borrow_mut();
        if cache.block != Some(b) {
            self.inflate(b, &mut cache)?;
        }
        let raw = &cache.bytes;
        let (mut pos, mut start) = (0, self.firsts[b]);
        let mut found: Option<(usize, usize, bool)> = None;
        while pos < raw.len() {
            start = start.checked_add(get_varint(raw, &mut pos)?)?;
            if start > addr {
                break;
            }
            let len = raw[pos..].iter().position(|&c| c <= END_PFX)?;
            let twin = raw[pos + len] == END_PFX;
            // Below the function itself: its padding symbol.
            let in_pfx = twin && addr - start < PFX_GAP;
            found = Some((pos, len, in_pfx));
            pos += len + 1;
        }
        let (at, len, in_pfx) = found?;
        if in_pfx {
            out.push_str("__pfx_");
        }
        out.push_str(std::str::from_utf8(&raw[at..at + len]).ok()?);
        Some(out.as_str())
    }

    fn inflate(&self, b: usize, cache: &mut Inflated) -> Option<()> {
        let from = self.offsets[b] as usize;
        let to = self
            .offsets
            .get(b + 1)
            .map_or(self.deflated.len(), |&o| o as usize);
        cache.block = None;
        cache.bytes.resize(self.max_block, 0);
        let n = miniz_oxide::inflate::decompress_slice_iter_to_slice(
            &mut cache.bytes,
            std::iter::once(&self.deflated[from..to]),
            false,
            true,
        )
        .ok()?;
        cache.bytes.truncate(n);
        cache.block = Some(b);
        Some(())
    }
}

/// A table that may still be loading (on another thread): lookups wait
/// for it only when a name is needed; until then nothing waits.
pub struct LazySymbols {
    table: OnceCell<KernelSymbols>,
    #[allow(clippy::type_complexity)]
    load: RefCell<Option<Box<dyn FnOnce() -> KernelSymbols>>>,
}

impl std::fmt::Debug for LazySymbols {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazySymbols")
            .field("loaded", &self.table.get().is_some())
            .finish()
    }
}

impl LazySymbols {
    /// `load` gives the table (e.g. by joining the thread that builds it).
    pub fn new(load: impl FnOnce() -> KernelSymbols + 'static) -> LazySymbols {
        LazySymbols {
            table: OnceCell::new(),
            load: RefCell::new(Some(Box::new(load))),
        }
    }

    pub fn ready(table: KernelSymbols) -> LazySymbols {
        LazySymbols {
            table: OnceCell::from(table),
            load: RefCell::new(None),
        }
    }

    /// The table, waiting for the load if it is still under way.
    pub fn get(&self) -> &KernelSymbols {
        self.table.get_or_init(|| {
            let load = self.load.borrow_mut().take();
            load.map(|f| f()).unwrap_or_default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
ffffffff81000000 T _stext
ffffffff81000100 t do_one
0000000000000000 T hidden
ffffffff81000050 D some_data
ffffffff81000200 T worker_thread\t[mymod]
garbage
zz T bad_addr
ffffffff81000100 T dup_same_addr
";

    fn name(k: &KernelSymbols, addr: u64) -> Option<String> {
        k.lookup_into(addr, &mut String::new()).map(str::to_string)
    }

    #[test]
    fn parses_sorts_and_looks_up() {
        let k = KernelSymbols::parse(SAMPLE.as_bytes());
        assert_eq!(k.len(), 3);
        assert_eq!(name(&k, 0xffffffff81000000).as_deref(), Some("_stext"));
        assert_eq!(name(&k, 0xffffffff81000050).as_deref(), Some("_stext"));
        // The first line of an address wins.
        assert_eq!(name(&k, 0xffffffff81000100).as_deref(), Some("do_one"));
        assert_eq!(name(&k, 0xffffffff810001ff).as_deref(), Some("do_one"));
        assert_eq!(
            name(&k, 0xffffffff81000234).as_deref(),
            Some("worker_thread")
        );
        assert_eq!(name(&k, 0xffffffff80ffffff), None);
        assert_eq!(name(&k, 0), None);
    }

    #[test]
    fn hidden_addresses_give_an_empty_table() {
        let k = KernelSymbols::parse(b"0000000000000000 T a\n0000000000000000 t b\n");
        assert!(k.is_empty());
        assert_eq!(name(&k, u64::MAX), None);
        assert!(KernelSymbols::parse(b"").is_empty());
    }

    #[test]
    fn padding_twins_fold_and_come_back() {
        let text = "\
ffffffff81000000 T __pfx_a
ffffffff81000010 T a
ffffffff81000030 t __pfx_b
ffffffff81000050 t b
ffffffff81000060 t __pfx_c
ffffffff81000070 t not_c
ffffffff81000080 t __pfx_
ffffffff81000090 t x
";
        let k = KernelSymbols::parse(text.as_bytes());
        let rows = symbol_rows(text.as_bytes());
        assert_eq!(k.len(), rows.len());
        for addr in 0xffffffff80ffff00..0xffffffff81000200 {
            assert_eq!(
                name(&k, addr).as_deref(),
                rows_lookup(&rows, addr),
                "{addr:x}"
            );
        }
    }

    #[test]
    fn many_blocks_match_the_naive_table() {
        let mut text = String::new();
        for i in 0..1000u64 {
            let a = 0xffffffff81000000 + i * 48;
            if i % 3 == 0 {
                text += &format!("{:x} t __pfx_f{i}\n", a - 16);
            }
            text += &format!("{a:x} T f{i}\n");
        }
        let k = KernelSymbols::parse(text.as_bytes());
        let rows = symbol_rows(text.as_bytes());
        for addr in (0xffffffff80ffff00..0xffffffff81000000 + 48 * 1001).step_by(7) {
            assert_eq!(name(&k, addr).as_deref(), rows_lookup(&rows, addr));
        }
        assert!(k.mem_bytes() < rows.len() * 8, "{} bytes", k.mem_bytes());
    }

    #[test]
    fn lazy_tables_load_once_when_needed() {
        let loads = std::rc::Rc::new(std::cell::Cell::new(0));
        let l = loads.clone();
        let lazy = LazySymbols::new(move || {
            l.set(l.get() + 1);
            KernelSymbols::parse(SAMPLE.as_bytes())
        });
        assert_eq!(loads.get(), 0);
        assert_eq!(lazy.get().len(), 3);
        assert_eq!(lazy.get().len(), 3);
        assert_eq!(loads.get(), 1);
    }
}

//! Kernel symbol table from `/proc/kallsyms`, for `symbolize_ksyms`.
//!
//! Only text symbols (`t`/`T`) are kept: symbol fields of ftrace events
//! hold function addresses. Names live in one string so a table of ~100k
//! symbols costs a few MB, not one allocation each.

/// Sorted address → name table.
#[derive(Debug, Default)]
pub struct KernelSymbols {
    addrs: Vec<u64>,
    /// End offset of each name in `names` (start = previous end).
    ends: Vec<u32>,
    names: String,
}

impl KernelSymbols {
    /// Parses kallsyms text (`ADDR TYPE NAME [\[module\]]` per line). Lines
    /// that do not parse, zero addresses (kptr_restrict) and non-text
    /// symbols are skipped.
    pub fn parse(text: &str) -> KernelSymbols {
        let mut rows: Vec<(u64, &str)> = Vec::new();
        for line in text.lines() {
            let mut it = line.split_ascii_whitespace();
            let (Some(a), Some(t), Some(name)) = (it.next(), it.next(), it.next()) else {
                continue;
            };
            if t != "t" && t != "T" {
                continue;
            }
            match u64::from_str_radix(a, 16) {
                Ok(addr) if addr != 0 => rows.push((addr, name)),
                _ => {}
            }
        }
        rows.sort_unstable_by_key(|r| r.0);
        rows.dedup_by_key(|r| r.0);
        let mut k = KernelSymbols::default();
        k.addrs.reserve_exact(rows.len());
        k.ends.reserve_exact(rows.len());
        for (addr, name) in rows {
            if k.names.len() + name.len() > u32::MAX as usize {
                break;
            }
            k.addrs.push(addr);
            k.names.push_str(name);
            k.ends.push(k.names.len() as u32);
        }
        k
    }

    /// Reads `/proc/kallsyms`. Empty (not an error) when addresses are hidden.
    pub fn load() -> std::io::Result<KernelSymbols> {
        Ok(Self::parse(&std::fs::read_to_string("/proc/kallsyms")?))
    }

    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }

    /// Approximate heap use in bytes.
    pub fn mem_bytes(&self) -> usize {
        self.addrs.capacity() * 8 + self.ends.capacity() * 4 + self.names.capacity()
    }

    /// The symbol containing `addr`: the last one starting at or below it.
    pub fn lookup(&self, addr: u64) -> Option<&str> {
        let i = self.addrs.partition_point(|&a| a <= addr).checked_sub(1)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        self.names.get(start..self.ends[i] as usize)
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

    #[test]
    fn parses_sorts_and_looks_up() {
        let k = KernelSymbols::parse(SAMPLE);
        assert_eq!(k.len(), 3);
        assert_eq!(k.lookup(0xffffffff81000000), Some("_stext"));
        assert_eq!(k.lookup(0xffffffff81000050), Some("_stext"));
        assert_eq!(k.lookup(0xffffffff81000100), Some("do_one"));
        assert_eq!(k.lookup(0xffffffff810001ff), Some("do_one"));
        assert_eq!(k.lookup(0xffffffff81000234), Some("worker_thread"));
        assert_eq!(k.lookup(0xffffffff80ffffff), None);
        assert_eq!(k.lookup(0), None);
    }

    #[test]
    fn hidden_addresses_give_an_empty_table() {
        let k = KernelSymbols::parse("0000000000000000 T a\n0000000000000000 t b\n");
        assert!(k.is_empty());
        assert_eq!(k.lookup(u64::MAX), None);
        assert!(KernelSymbols::parse("").is_empty());
    }
}

//! Turns sampled addresses into (mapping, ELF address, function name):
//! per-process executable mappings from `/proc/PID/maps`, per-file build
//! ids, load biases and symbols, and the kernel's kallsyms. Everything is
//! cached with a byte budget; past it the caches start over. Symbol tables
//! load on a helper thread ([`SymbolLoader`]) and a pass waits for them
//! only until its deadline: a file late for it has its frames written
//! mapped but unnamed until a later pass finds it loaded. Big unwind
//! tables load there too; a process's samples wait in the unwind queue
//! until its tables are in ([`TablesLoading`]).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::dwarf::{self, ModuleSpec, ProcessUnwinder};
use super::elf::{self, ElfInfo, UnwindSections};
use super::far_stack::FarStack;
use super::maps::{self, Map};
use super::symbol_loader::{FileReader, Loaded, SymbolLoader, Want};
use super::unwind::{StackCopy, UnwindError, UserRegs};
use crate::traced_probes::ftrace::ksyms_load;
use crate::traced_probes::ftrace::parse::ksyms::LazySymbols;

const MAX_MAPS_PER_PROCESS: usize = 8192;
const MAX_PROCESSES: usize = 4096;
/// Symbol tables kept at once.
const FILE_CACHE_BUDGET: usize = 128 << 20;
/// Biggest file we open for symbols.
const MAX_FILE_BYTES: u64 = 2 << 30;
/// Unwind sections (`.eh_frame`, `.eh_frame_hdr`) kept at once, of all
/// files; past it they and every process's unwinder start over.
const UNWIND_CACHE_BUDGET: usize = 64 << 20;
/// Biggest unwind section read from one file (a bigger one is left out:
/// that file's frames fall back to frame pointers).
pub const MAX_UNWIND_SECTION: usize = 16 << 20;
/// Files with up to this many bytes of unwind tables (a libc has ~0.1
/// MiB) are read on the spot; bigger ones on the helper thread.
const INLINE_UNWIND_BYTES: u64 = 1 << 20;
/// The longest a pass waits for one file's symbols; any pass may wait
/// that long, even one that starts past its deadline (a small file parses
/// in a millisecond or two: its first frames stay named on a busy
/// machine). A stop with a longer budget keeps the rest for unwinding.
const LOAD_WAIT: Duration = Duration::from_millis(100);
/// Files with up to this many bytes of symbol tables (~40k symbols; a
/// libc has ~0.1 MiB) are parsed on the spot, sparing the handoff to the
/// helper thread (a wait for the scheduler on a busy machine).
const INLINE_SYMBOL_BYTES: u64 = 1 << 20;
/// Files handed to the helper at once (each holds a descriptor): more
/// wait, headers only, for a later pass to hand them over.
const MAX_QUEUED_LOADS: usize = 8;

pub struct Process {
    pub maps: Vec<Map>,
    /// The file of each map, once looked up (saves a path hash per frame).
    files: Vec<Option<Rc<ElfInfo>>>,
    /// Re-read the maps once when an address misses them.
    reread: bool,
    /// Built at the first DWARF unwind; dropped with the process.
    unwinder: Option<ProcessUnwinder>,
    /// `/proc/PID/mem`, opened at the first read past a stack copy (None
    /// inside: it could not be opened).
    mem: Option<Option<File>>,
}

impl Process {
    fn read(pid: u32) -> Process {
        let maps = read_maps(pid);
        Process {
            files: vec![None; maps.len()],
            maps,
            reread: true,
            unwinder: None,
            mem: None,
        }
    }
}

/// What one user frame resolves to.
pub struct UserFrame {
    pub map: Map,
    pub file: Rc<ElfInfo>,
    /// Address in the ELF's virtual address space (upstream's rel_pc).
    pub rel_pc: u64,
    /// The file's symbols are still loading: `file` has no names yet.
    pub names_pending: bool,
}

#[derive(Default)]
pub struct Resolver {
    processes: HashMap<u32, Process>,
    files: HashMap<String, Rc<ElfInfo>>,
    files_bytes: usize,
    /// Files whose symbols the loader has not sent back yet, with the
    /// headers read here (build id, load bias) for their frames meanwhile.
    loading: HashMap<String, Rc<ElfInfo>>,
    /// Files not handed over yet (the helper's queue was full), with the
    /// process they were found in and what is wanted of them.
    waiting: Vec<(String, u32, Want)>,
    loader: SymbolLoader,
    /// Until when this pass waits for a file's symbols.
    load_until: Option<Instant>,
    /// Each file's unwind sections; `None` while the helper reads them.
    unwind_files: HashMap<String, Option<Arc<UnwindSections>>>,
    unwind_bytes: usize,
    /// Unwind tables came in since [`Resolver::take_tables_arrived`].
    tables_arrived: bool,
    unwind_cache: dwarf::Cache,
    far: FarStack,
    kernel: Option<LazySymbols>,
    symbols: bool,
    pub stats: ResolverStats,
}

/// A sample's process has unwind tables still loading on the helper
/// thread: the sample waits in the unwind queue.
#[derive(Debug, PartialEq, Eq)]
pub struct TablesLoading;

#[derive(Debug, Default, Clone, Copy)]
pub struct ResolverStats {
    pub maps_reads: u64,
    pub elf_reads: u64,
    pub cache_resets: u64,
    /// Files whose unwind sections were read, and of those, the ones read
    /// on the helper thread (their samples waited in the unwind queue).
    pub unwind_reads: u64,
    pub unwind_tables_background: u64,
    /// Samples whose walk read their stack past the copy, and the pages
    /// it read from `/proc/PID/mem`.
    pub far_samples: u64,
    pub far_pages: u64,
    /// Of those samples, walks that wanted more than the page budget or
    /// a page the process's memory refused (their unwind_error says how
    /// they stopped).
    pub far_refused: u64,
    /// Files whose symbols were not loaded by their pass's deadline, and
    /// the frames written without a name while they loaded.
    pub symbols_late: u64,
    pub frames_unnamed_loading: u64,
}

impl Resolver {
    pub fn new(symbols: bool, kernel_names: bool) -> Resolver {
        // On a thread: parsing ~100k symbols takes seconds on a slow
        // board (3 s in the aarch64 TCG guest), and setup must answer
        // traced now. The first kernel frame waits for it.
        let kernel = kernel_names.then(|| ksyms_load::in_background("linux.perf"));
        Resolver {
            symbols,
            kernel,
            ..Default::default()
        }
    }

    /// The kernel function containing `ip`, written into `out`.
    pub fn kernel_name<'o>(&self, ip: u64, out: &'o mut String) -> Option<&'o str> {
        self.kernel.as_ref()?.get().lookup_into(ip, out)
    }

    /// A read pass (or the stop) starts: symbol tables are waited for until
    /// `deadline` (at least [`LOAD_WAIT`] from now); those loaded since
    /// the last pass are taken.
    pub fn begin_pass(&mut self, deadline: Instant) {
        self.load_until = Some(deadline.max(Instant::now() + LOAD_WAIT));
        self.take_loaded(Instant::now(), None);
        while self.loader.in_flight() < MAX_QUEUED_LOADS {
            let Some((path, pid, want)) = self.waiting.pop() else {
                break;
            };
            let queued =
                open_in(pid, &path).is_some_and(|f| self.loader.submit(&path, f, want).is_ok());
            if !queued && want == Want::UnwindTables {
                // Gone: its frames fall back to frame pointers.
                self.insert_unwind(&path, UnwindSections::default());
            } else if !queued {
                // Gone: its frames keep the headers' facts, without names.
                if let Some(h) = self.loading.remove(&path) {
                    let info = ElfInfo {
                        build_id: h.build_id.clone(),
                        load_bias: h.load_bias,
                        ..Default::default()
                    };
                    self.insert_file(&path, info);
                }
            }
        }
    }

    /// Takes the loader's parsed files until `until` or until the symbols
    /// of `want` arrive (any unwind tables with `None`); true if they did.
    fn take_loaded(&mut self, until: Instant, want: Option<&str>) -> bool {
        while let Some(loaded) = self.loader.next(until) {
            match loaded {
                Loaded::Symbols(path, info) => {
                    self.loading.remove(&path);
                    self.insert_file(&path, info);
                    if want == Some(path.as_str()) {
                        return true;
                    }
                }
                Loaded::UnwindTables(path, sections) => {
                    self.insert_unwind(&path, sections);
                    if want.is_none() {
                        return true;
                    }
                }
            }
        }
        false
    }

    /// Waits until `until` at most for unwind tables the helper reads;
    /// true if some came in (since the last call).
    pub fn wait_for_tables(&mut self, until: Instant) -> bool {
        self.tables_arrived || self.take_loaded(until, None)
    }

    /// Whether unwind tables came in since the last call.
    pub fn take_tables_arrived(&mut self) -> bool {
        std::mem::take(&mut self.tables_arrived)
    }

    /// Forgets a process's maps (it may have exec'd or exited).
    pub fn forget_processes(&mut self) {
        self.processes.clear();
    }

    /// Forgets one process's maps (it exec'd).
    pub fn forget_process(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    fn process(&mut self, pid: u32) -> &mut Process {
        if self.processes.len() >= MAX_PROCESSES && !self.processes.contains_key(&pid) {
            self.processes.clear();
            self.stats.cache_resets += 1;
        }
        let stats = &mut self.stats;
        self.processes.entry(pid).or_insert_with(|| {
            stats.maps_reads += 1;
            Process::read(pid)
        })
    }

    /// A file's ELF facts (empty when it cannot be read: remembered too),
    /// and whether its symbols are still loading (then only its headers
    /// are there). A new file is waited for until the pass's deadline.
    fn file(&mut self, pid: u32, path: &str) -> (Rc<ElfInfo>, bool) {
        if let Some(f) = self.files.get(path) {
            return (f.clone(), false);
        }
        if let Some(headers) = self.loading.get(path).cloned() {
            // Late for an earlier pass: this one does not wait for it.
            if !self.take_loaded(Instant::now(), Some(path)) {
                return (headers, true);
            }
            return self.file(pid, path);
        }
        self.stats.elf_reads += 1;
        let Some(f) = open_in(pid, path) else {
            return (self.insert_file(path, ElfInfo::default()), false);
        };
        let f = FileReader(f);
        // Without names a file is only its headers: read here, as are
        // small tables.
        if !self.symbols || elf::symbol_table_bytes(&f) <= INLINE_SYMBOL_BYTES {
            let info = elf::parse(&f, self.symbols).unwrap_or_default();
            return (self.insert_file(path, info), false);
        }
        if self.loader.in_flight() >= MAX_QUEUED_LOADS {
            let headers = Rc::new(elf::parse(&f, false).unwrap_or_default());
            self.stats.symbols_late += 1;
            self.loading.insert(path.to_string(), headers.clone());
            self.waiting.push((path.to_string(), pid, Want::Symbols));
            return (headers, true);
        }
        let mine = f.0.try_clone().ok().map(FileReader);
        if let Err(f) = self.loader.submit(path, f.0, Want::Symbols) {
            let info = elf::parse(&FileReader(f), true).unwrap_or_default();
            return (self.insert_file(path, info), false);
        }
        let most = Instant::now() + LOAD_WAIT;
        let until = self.load_until.map_or(most, |u| u.min(most));
        if self.take_loaded(until, Some(path)) {
            if let Some(f) = self.files.get(path) {
                return (f.clone(), false);
            }
        }
        self.stats.symbols_late += 1;
        crate::log_info!(
            "linux.perf: {path}: symbols still loading at the pass's deadline; its frames are \
             written unnamed until they are in"
        );
        let headers = Rc::new(mine.and_then(|f| elf::parse(&f, false)).unwrap_or_default());
        self.loading.insert(path.to_string(), headers.clone());
        (headers, true)
    }

    /// Caches a parsed file within the cache's byte budget.
    fn insert_file(&mut self, path: &str, info: ElfInfo) -> Rc<ElfInfo> {
        let bytes = info.symbols.mem_bytes() + path.len() + 64;
        if self.files_bytes + bytes > FILE_CACHE_BUDGET {
            self.files.clear();
            self.files_bytes = 0;
            self.stats.cache_resets += 1;
        }
        self.files_bytes += bytes;
        let info = Rc::new(info);
        self.files.insert(path.to_string(), info.clone());
        info
    }

    /// A file's unwind sections (empty when unreadable: remembered too);
    /// `None` while the helper reads them (big tables go there).
    fn unwind_file(&mut self, pid: u32, path: &str) -> Option<Arc<UnwindSections>> {
        if let Some(f) = self.unwind_files.get(path) {
            return f.clone();
        }
        self.stats.unwind_reads += 1;
        let Some(f) = open_in(pid, path) else {
            return Some(self.insert_unwind(path, UnwindSections::default()));
        };
        let f = FileReader(f);
        let big = elf::unwind_sections(&f, 0).is_some_and(|s| s.table_bytes > INLINE_UNWIND_BYTES);
        let f = if !big {
            f.0
        } else if self.loader.in_flight() >= MAX_QUEUED_LOADS {
            self.waiting
                .push((path.to_string(), pid, Want::UnwindTables));
            return self.unwind_loading(path);
        } else {
            match self.loader.submit(path, f.0, Want::UnwindTables) {
                Ok(()) => return self.unwind_loading(path),
                Err(f) => f,
            }
        };
        let sections = elf::unwind_sections(&FileReader(f), MAX_UNWIND_SECTION);
        Some(self.insert_unwind(path, sections.unwrap_or_default()))
    }

    fn unwind_loading(&mut self, path: &str) -> Option<Arc<UnwindSections>> {
        self.stats.unwind_tables_background += 1;
        self.unwind_files.insert(path.to_string(), None);
        None
    }

    /// Caches a file's unwind sections within the cache's byte budget.
    fn insert_unwind(&mut self, path: &str, sections: UnwindSections) -> Arc<UnwindSections> {
        let bytes = sections.mem_bytes() + path.len() + 64;
        if self.unwind_bytes + bytes > UNWIND_CACHE_BUDGET {
            // The unwinders hold the sections too: they go with them.
            // (A file still loading is inserted when it comes back.)
            self.unwind_files.clear();
            self.unwind_bytes = 0;
            for p in self.processes.values_mut() {
                p.unwinder = None;
            }
            self.stats.cache_resets += 1;
        }
        self.unwind_bytes += bytes;
        self.tables_arrived = true;
        let sections = Arc::new(sections);
        self.unwind_files
            .insert(path.to_string(), Some(sections.clone()));
        sections
    }

    /// The process's unwinder over its current maps; false while some of
    /// its files' unwind tables load (every such file is asked for).
    fn build_unwinder(&mut self, pid: u32) -> bool {
        let maps = self.process(pid).maps.clone();
        let mut files = Vec::with_capacity(maps.len());
        let mut loading = false;
        for m in &maps {
            if m.path.starts_with('/') && dwarf::HAS_DWARF {
                match self.unwind_file(pid, &m.path) {
                    Some(s) => files.push((m, s)),
                    None => loading = true,
                }
            }
        }
        if loading {
            return false;
        }
        let mut specs = Vec::with_capacity(files.len());
        for (m, s) in &files {
            let bias = self.file(pid, &m.path).0.load_bias;
            specs.push(ModuleSpec {
                name: &m.path,
                avma: m.start..m.end,
                base_avma: m.start.wrapping_sub(m.pgoff).wrapping_sub(bias),
                sections: s,
            });
        }
        let unwinder = ProcessUnwinder::new(specs.into_iter());
        self.process(pid).unwinder = Some(unwinder);
        true
    }

    /// UNWIND_DWARF of one sample of `pid`: pcs leaf first into `out`;
    /// nothing while the process's unwind tables load.
    pub fn unwind(
        &mut self,
        pid: u32,
        regs: UserRegs,
        stack: StackCopy<'_>,
        out: &mut Vec<u64>,
    ) -> Result<Option<UnwindError>, TablesLoading> {
        let p = self.process(pid);
        let mut mapped = maps::find_index(&p.maps, regs.pc).is_some();
        if !mapped && p.reread {
            // Maps changed since read (dlopen, exec): once per process.
            *p = Process::read(pid);
            p.reread = false;
            self.stats.maps_reads += 1;
            mapped = maps::find_index(&self.process(pid).maps, regs.pc).is_some();
        }
        if self.process(pid).unwinder.is_none() && !self.build_unwinder(pid) {
            return Err(TablesLoading);
        }
        let Some(p) = self.processes.get_mut(&pid) else {
            return Ok(Some(UnwindError::InvalidMap));
        };
        let Some(u) = p.unwinder.as_ref() else {
            return Ok(None);
        };
        let far = &mut self.far;
        far.reset(stack.sp, stack.bytes.len());
        let mem = &mut p.mem;
        let mut read_page = |page: u64, buf: &mut [u8]| {
            let f = mem.get_or_insert_with(|| File::open(format!("/proc/{pid}/mem")).ok());
            f.as_ref()
                .is_some_and(|f| f.read_exact_at(buf, page).is_ok())
        };
        let mut far_word = |addr: u64| far.word(addr, super::unwind::WORD, &mut read_page);
        let err = u.unwind(&mut self.unwind_cache, regs, stack, &mut far_word, out);
        if self.far.pages_read() > 0 || self.far.refused {
            self.stats.far_samples += 1;
            self.stats.far_pages += self.far.pages_read() as u64;
            self.stats.far_refused += self.far.refused as u64;
        }
        Ok(err.or((!mapped).then_some(UnwindError::InvalidMap)))
    }

    /// Resolves a user address of `pid`; `None` when no mapping has it.
    pub fn user_frame(&mut self, pid: u32, pc: u64) -> Option<UserFrame> {
        let p = self.process(pid);
        let reread = maps::find_index(&p.maps, pc).is_none() && p.reread;
        if reread {
            *p = Process::read(pid);
            p.reread = false;
        }
        let found =
            maps::find_index(&p.maps, pc).map(|i| (i, p.maps[i].clone(), p.files[i].clone()));
        self.stats.maps_reads += reread as u64;
        let (i, map, file) = found?;
        let (file, names_pending) = match file {
            Some(f) => (f, false),
            None => {
                let (f, pending) = self.file(pid, &map.path);
                // A file still loading is looked up again next time.
                if let Some(slot) = self
                    .processes
                    .get_mut(&pid)
                    .and_then(|p| p.files.get_mut(i))
                    .filter(|_| !pending)
                {
                    *slot = Some(f.clone());
                }
                (f, pending)
            }
        };
        self.stats.frames_unnamed_loading += (names_pending && self.symbols) as u64;
        let rel_pc = (pc - map.start)
            .wrapping_add(map.pgoff)
            .wrapping_add(file.load_bias);
        Some(UserFrame {
            map,
            file,
            rel_pc,
            names_pending,
        })
    }
}

/// A mapped file of `pid`: through the process's root first
/// (containers), then as named; `None` for anything else or too big.
fn open_in(pid: u32, path: &str) -> Option<File> {
    if !path.starts_with('/') {
        return None;
    }
    let f = File::open(format!("/proc/{pid}/root{path}"))
        .or_else(|_| File::open(path))
        .ok()?;
    f.metadata()
        .is_ok_and(|m| m.len() <= MAX_FILE_BYTES)
        .then_some(f)
}

fn read_maps(pid: u32) -> Vec<Map> {
    match std::fs::read_to_string(format!("/proc/{pid}/maps")) {
        Ok(t) => maps::parse(&t, MAX_MAPS_PER_PROCESS),
        Err(_) => Vec::new(),
    }
}

/// `/proc/PID/cmdline` as upstream matches it: argv[0] without its
/// directory (and without an `@suffix`), plus the whole argv[0].
pub fn cmdline(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let argv0 = raw.split(|&b| b == 0).next()?;
    Some(String::from_utf8_lossy(argv0).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files with big symbol tables (links to this test binary, megabytes
    /// of `.symtab`): eight go to the helper, the rest wait with their
    /// headers, and later passes hand them over until every one is named.
    #[test]
    fn big_tables_queue_at_most_eight_and_all_load_in_later_passes() {
        let dir = tempfile::tempdir().unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let pid = std::process::id();
        let mut r = Resolver::new(true, false);
        r.begin_pass(Instant::now());
        let paths: Vec<String> = (0..MAX_QUEUED_LOADS + 2)
            .map(|i| {
                let p = dir.path().join(format!("big{i}"));
                std::os::unix::fs::symlink(&exe, &p).unwrap();
                p.display().to_string()
            })
            .collect();
        let mut pending = 0;
        for p in &paths {
            let (info, late) = r.file(pid, p);
            assert!(!info.build_id.is_empty(), "the headers are read at once");
            pending += late as usize;
        }
        assert!(r.loader.in_flight() <= MAX_QUEUED_LOADS);
        assert_eq!(r.stats.symbols_late as usize, pending);
        assert!(pending >= 2, "the two past the queue at least");
        assert!(!r.waiting.is_empty(), "none waited for room in the queue");
        let until = Instant::now() + Duration::from_secs(300);
        while paths.iter().any(|p| !r.files.contains_key(p)) {
            assert!(Instant::now() < until, "not all loaded");
            std::thread::sleep(Duration::from_millis(50));
            r.begin_pass(Instant::now());
        }
        assert!(r.loading.is_empty() && r.waiting.is_empty());
        for p in &paths {
            assert!(!r.file(pid, p).0.symbols.is_empty(), "{p}");
        }
    }
}

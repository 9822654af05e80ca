//! All tracefs I/O goes through [`Tracefs`].
//!
//! A `Tracefs` is a directory: the tracefs root, an instance under
//! `instances/<name>/`, or a test directory. Everything else in the ftrace
//! code gets file contents from here, so the parsers stay pure.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

pub use super::parse::stats::CpuStats;

/// Where tracefs is usually mounted, in order of preference.
pub const TRACEFS_ROOTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Handle on one tracefs directory (root or instance).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracefs {
    root: PathBuf,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Rejects names that could escape the events or instances directory.
fn check_component(what: &str, name: &str) -> io::Result<()> {
    if name.is_empty()
        || name == "."
        || name.contains('/')
        || name.starts_with("..")
        || name.contains('\0')
    {
        return Err(invalid(format!("bad {what} name {name:?}")));
    }
    Ok(())
}

/// Checks an instance name from a config (or a state file) before any
/// path is built from it: one plain component of `instances/`.
pub fn check_instance_name(name: &str) -> io::Result<()> {
    check_component("instance", name)
}

impl Tracefs {
    /// A tracefs rooted at `root` (no checks; tests use a plain directory).
    pub fn new(root: impl Into<PathBuf>) -> Tracefs {
        Tracefs { root: root.into() }
    }

    /// Finds the mounted tracefs: the first of [`TRACEFS_ROOTS`] whose `trace`
    /// file opens read-only. If none does and we are root, mounts tracefs on
    /// `/sys/kernel/tracing` and tries again.
    pub fn discover() -> io::Result<Tracefs> {
        if let Some(t) = Self::find_mounted() {
            return Ok(t);
        }
        super::sys::mount_tracefs(Path::new(TRACEFS_ROOTS[0]))?;
        Self::find_mounted()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "tracefs not found"))
    }

    fn find_mounted() -> Option<Tracefs> {
        TRACEFS_ROOTS
            .iter()
            .map(|r| Tracefs::new(*r))
            .find(|t| fs::File::open(t.root.join("trace")).is_ok())
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Path of a file or directory below the root.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// The tracefs of instance `name`. `hyp` and `hypervisor` live directly
    /// under the root; every other instance under `instances/`. Does not
    /// create anything.
    pub fn instance(&self, name: &str) -> io::Result<Tracefs> {
        check_component("instance", name)?;
        if name == "hyp" || name == "hypervisor" {
            return Ok(Tracefs::new(self.root.join(name)));
        }
        Ok(Tracefs::new(self.root.join("instances").join(name)))
    }

    /// Creates instance `name` (mkdir; fine if it already exists).
    pub fn create_instance(&self, name: &str) -> io::Result<Tracefs> {
        let t = self.instance(name)?;
        match fs::create_dir(&t.root) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
            _ => Ok(t),
        }
    }

    /// Removes instance `name` (rmdir). The kernel frees its buffers.
    pub fn remove_instance(&self, name: &str) -> io::Result<()> {
        fs::remove_dir(self.instance(name)?.root)
    }

    // ---- raw file access -------------------------------------------------

    /// Reads a whole file below the root as text (lossy UTF-8).
    pub fn read_file(&self, rel: &str) -> io::Result<String> {
        // Some tracefs files (header_page) regenerate per read() and return
        // EOF after a short first read, so never read in small pieces (as
        // `read_to_end`'s initial probe does).
        let mut f = fs::File::open(self.path(rel))?;
        let mut bytes = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => bytes.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Writes `value` to a control file with one `write()`, without
    /// truncating (truncation has side effects on some tracefs files).
    pub fn write_file(&self, rel: &str, value: &str) -> io::Result<()> {
        let mut f = OpenOptions::new().write(true).open(self.path(rel))?;
        f.write_all(value.as_bytes())
    }

    /// Appends `value` (for list files such as `set_event`).
    pub fn append_file(&self, rel: &str, value: &str) -> io::Result<()> {
        let mut f = OpenOptions::new().append(true).open(self.path(rel))?;
        f.write_all(value.as_bytes())
    }

    /// Opens `rel` with O_TRUNC, which clears buffers/lists in tracefs.
    pub fn truncate_file(&self, rel: &str) -> io::Result<()> {
        OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(self.path(rel))
            .map(drop)
    }

    fn read_trimmed(&self, rel: &str) -> io::Result<String> {
        Ok(self.read_file(rel)?.trim().to_string())
    }

    fn read_u64(&self, rel: &str) -> io::Result<u64> {
        let text = self.read_trimmed(rel)?;
        // buffer_size_kb shows e.g. "7 (expanded: 1408)" before first use.
        let first = text.split_whitespace().next().unwrap_or("");
        first
            .parse()
            .map_err(|_| invalid(format!("{rel}: not a number: {text:?}")))
    }

    // ---- control files ---------------------------------------------------

    pub fn set_tracing_on(&self, on: bool) -> io::Result<()> {
        self.write_file("tracing_on", if on { "1" } else { "0" })
    }

    pub fn is_tracing_on(&self) -> io::Result<bool> {
        Ok(self.read_trimmed("tracing_on")? == "1")
    }

    /// Per-cpu ring buffer size.
    pub fn set_buffer_size_kb(&self, kb: u64) -> io::Result<()> {
        self.write_file("buffer_size_kb", &kb.max(1).to_string())
    }

    pub fn buffer_size_kb(&self) -> io::Result<u64> {
        self.read_u64("buffer_size_kb")
    }

    /// `buffer_percent`: how full a cpu buffer must be before blocking
    /// readers wake up (writable since ~5.x; 6.9+ for poll semantics).
    pub fn set_buffer_percent(&self, percent: u32) -> io::Result<()> {
        self.write_file("buffer_percent", &percent.min(100).to_string())
    }

    pub fn buffer_percent(&self) -> io::Result<u64> {
        self.read_u64("buffer_percent")
    }

    /// Returns (current clock, available clocks) from `trace_clock`, whose
    /// format is `local [global] boot`.
    pub fn clocks(&self) -> io::Result<(String, Vec<String>)> {
        let text = self.read_file("trace_clock")?;
        let mut current = String::new();
        let mut all = Vec::new();
        for word in text.split_whitespace() {
            if let Some(w) = word.strip_prefix('[').and_then(|w| w.strip_suffix(']')) {
                current = w.to_string();
                all.push(w.to_string());
            } else {
                all.push(word.to_string());
            }
        }
        Ok((current, all))
    }

    pub fn set_clock(&self, clock: &str) -> io::Result<()> {
        self.write_file("trace_clock", clock)
    }

    pub fn current_tracer(&self) -> io::Result<String> {
        self.read_trimmed("current_tracer")
    }

    pub fn set_current_tracer(&self, tracer: &str) -> io::Result<()> {
        self.write_file("current_tracer", tracer)
    }

    /// Clears the ring buffers of every cpu.
    pub fn clear_trace(&self) -> io::Result<()> {
        self.truncate_file("trace")
    }

    /// Writes one userspace marker (becomes an `ftrace/print` event).
    pub fn write_trace_marker(&self, text: &str) -> io::Result<()> {
        self.write_file("trace_marker", text)
    }

    // ---- events ----------------------------------------------------------

    fn event_dir(&self, group: &str, name: &str) -> io::Result<String> {
        check_component("group", group)?;
        check_component("event", name)?;
        Ok(format!("events/{group}/{name}"))
    }

    /// Enables `group/name` via its `enable` file, falling back to
    /// appending `group:name` to `set_event` (older or restricted kernels).
    pub fn enable_event(&self, group: &str, name: &str) -> io::Result<()> {
        let dir = self.event_dir(group, name)?;
        self.write_file(&format!("{dir}/enable"), "1")
            .or_else(|_| self.append_file("set_event", &format!("{group}:{name}")))
    }

    pub fn disable_event(&self, group: &str, name: &str) -> io::Result<()> {
        let dir = self.event_dir(group, name)?;
        self.write_file(&format!("{dir}/enable"), "0")
            .or_else(|_| self.append_file("set_event", &format!("!{group}:{name}")))
    }

    pub fn is_event_enabled(&self, group: &str, name: &str) -> io::Result<bool> {
        let dir = self.event_dir(group, name)?;
        Ok(self.read_trimmed(&format!("{dir}/enable"))? == "1")
    }

    /// Disables every event (`events/enable`, falling back to `set_event`).
    pub fn disable_all_events(&self) -> io::Result<()> {
        self.write_file("events/enable", "0")
            .or_else(|_| self.truncate_file("set_event"))
    }

    /// Writes a tracepoint filter expression (e.g. for raw_syscalls).
    pub fn set_event_filter(
        &self,
        group: &str,
        name: Option<&str>,
        filter: &str,
    ) -> io::Result<()> {
        let rel = match name {
            Some(n) => format!("{}/filter", self.event_dir(group, n)?),
            None => {
                check_component("group", group)?;
                format!("events/{group}/filter")
            }
        };
        self.write_file(&rel, filter)
    }

    fn list_dirs(&self, rel: &str) -> io::Result<Vec<String>> {
        let mut names: Vec<String> = fs::read_dir(self.path(rel))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort_unstable();
        Ok(names)
    }

    /// Event groups (directories under `events/`).
    pub fn groups(&self) -> io::Result<Vec<String>> {
        self.list_dirs("events")
    }

    /// Events of one group.
    pub fn events_in_group(&self, group: &str) -> io::Result<Vec<String>> {
        check_component("group", group)?;
        self.list_dirs(&format!("events/{group}"))
    }

    /// All `(group, event)` pairs.
    pub fn all_events(&self) -> io::Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for g in self.groups()? {
            for e in self.events_in_group(&g).unwrap_or_default() {
                out.push((g.clone(), e));
            }
        }
        Ok(out)
    }

    /// Text of `events/<group>/<name>/format`.
    pub fn read_format(&self, group: &str, name: &str) -> io::Result<String> {
        self.read_file(&format!("{}/format", self.event_dir(group, name)?))
    }

    pub fn read_header_page(&self) -> io::Result<String> {
        self.read_file("events/header_page")
    }

    pub fn read_header_event(&self) -> io::Result<String> {
        self.read_file("events/header_event")
    }

    pub fn read_printk_formats(&self) -> io::Result<String> {
        self.read_file("printk_formats")
    }

    // ---- per cpu ---------------------------------------------------------

    /// Number of `per_cpu/cpuN` directories (possible cpus).
    pub fn num_cpus(&self) -> io::Result<usize> {
        Ok(self
            .list_dirs("per_cpu")?
            .iter()
            .filter(|n| {
                n.strip_prefix("cpu")
                    .is_some_and(|d| d.parse::<u32>().is_ok())
            })
            .count())
    }

    pub fn cpu_stats(&self, cpu: usize) -> io::Result<CpuStats> {
        Ok(CpuStats::parse(
            &self.read_file(&format!("per_cpu/cpu{cpu}/stats"))?,
        ))
    }

    pub fn trace_pipe_raw_path(&self, cpu: usize) -> PathBuf {
        self.path(&format!("per_cpu/cpu{cpu}/trace_pipe_raw"))
    }

    /// Size of one ring-buffer page in bytes, from `header_page` (offset +
    /// size of `data`). `None` if that file is missing or odd.
    pub fn ring_buffer_page_size(&self) -> Option<usize> {
        let text = self.read_header_page().ok()?;
        let layout = super::parse::format::parse_header_page(&text).ok()?;
        Some(layout.page_size)
    }

    /// Page header layout from `header_page`, or the 64-bit default.
    pub fn page_header_layout(&self) -> super::parse::format::PageHeaderLayout {
        self.read_header_page()
            .ok()
            .and_then(|t| super::parse::format::parse_header_page(&t).ok())
            .unwrap_or(super::parse::format::PageHeaderLayout::DEFAULT_64)
    }

    /// The compile-time event table merged with this kernel's formats, with
    /// `printk_formats` loaded for string-pointer fields.
    pub fn translation_table(&self) -> super::parse::translate::TranslationTable {
        let mut t =
            super::parse::translate::TranslationTable::build(&|g, n| self.read_format(g, n).ok());
        if let Ok(text) = self.read_printk_formats() {
            t.set_printk_formats(super::parse::translate::parse_printk_formats(&text));
        }
        t
    }

    // ---- kprobes (top-level files: one list for the machine) ---------------

    /// Whether this kernel can make kprobe events (`CONFIG_KPROBE_EVENTS`).
    pub fn has_kprobe_events(&self) -> bool {
        self.path("kprobe_events").is_file()
    }

    /// Writes one line (from [`super::parse::kprobes`]) to `kprobe_events`.
    pub fn kprobe_events_line(&self, line: &str) -> io::Result<()> {
        self.append_file("kprobe_events", line)
    }

    pub fn read_kprobe_profile(&self) -> io::Result<String> {
        self.read_file("kprobe_profile")
    }

    // ---- reset -----------------------------------------------------------

    /// Leaves the instance idle: tracing off, events off, nop tracer, empty
    /// buffer of `buffer_kb` per cpu, `buffer_percent` back to 50. The
    /// function-tracer files may be refused (EPERM even for root on locked
    /// down kernels), so they are best effort. Returns the first hard error.
    pub fn reset(&self, buffer_kb: u64) -> io::Result<()> {
        let mut first_err: Option<io::Error> = None;
        let mut note = |r: io::Result<()>| {
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        };
        note(self.set_tracing_on(false));
        note(self.set_buffer_size_kb(buffer_kb));
        // Optional on old or restricted kernels.
        let _ = self.disable_all_events();
        let _ = self.set_event_filter("raw_syscalls", None, "0");
        let _ = self.set_current_tracer("nop");
        let _ = self.set_buffer_percent(50);
        let _ = self.truncate_file("set_ftrace_filter");
        let _ = self.truncate_file("set_graph_function");
        let _ = self.write_file("max_graph_depth", "0");
        let _ = self.truncate_file("set_ftrace_pid");
        note(self.clear_trace());
        first_err.map_or(Ok(()), Err)
    }

    /// `--reset-ftrace`: resets every well-known tracefs root that exists.
    /// Succeeds if at least one root was reset cleanly.
    pub fn hard_reset_all() -> io::Result<()> {
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no tracefs root");
        for root in TRACEFS_ROOTS {
            match Tracefs::new(root).reset(4) {
                Ok(()) => return Ok(()),
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_names_are_checked() {
        let t = Tracefs::new("/x");
        assert!(t.instance("a/b").is_err());
        assert!(t.instance("..").is_err());
        assert!(t.instance("..foo").is_err());
        assert!(t.instance("").is_err());
        assert_eq!(
            t.instance("foo").unwrap().root(),
            Path::new("/x/instances/foo")
        );
        assert_eq!(t.instance("hyp").unwrap().root(), Path::new("/x/hyp"));
        assert!(t.read_format("../..", "x").is_err());
    }

    /// The live kernel's events: atrace's `sched` and `idle` resolve to
    /// real events.
    #[test]
    fn live_kernel_atrace_categories() {
        use crate::traced_probes::ftrace::parse::atrace::category_events;
        let t = Tracefs::discover().unwrap();
        let k = t.all_events().unwrap();
        let sched = category_events("sched", &k).unwrap();
        assert!(sched.contains(&("sched".into(), "sched_switch".into())));
        assert!(sched.contains(&("task".into(), "task_newtask".into())));
        let idle = category_events("idle", &k).unwrap();
        assert_eq!(
            idle.into_iter().collect::<Vec<_>>(),
            [("power".to_string(), "cpu_idle".to_string())]
        );
    }

    #[test]
    fn fake_root_files() {
        let dir = tempfile::tempdir().unwrap();
        let t = Tracefs::new(dir.path());
        fs::create_dir_all(dir.path().join("events/sched/sched_switch")).unwrap();
        fs::write(dir.path().join("events/sched/sched_switch/enable"), "0").unwrap();
        fs::write(dir.path().join("trace_clock"), "local [boot] mono_raw\n").unwrap();
        t.enable_event("sched", "sched_switch").unwrap();
        assert!(t.is_event_enabled("sched", "sched_switch").unwrap());
        let (cur, all) = t.clocks().unwrap();
        assert_eq!(cur, "boot");
        assert_eq!(all, ["local", "boot", "mono_raw"]);
        assert_eq!(
            t.all_events().unwrap(),
            [("sched".into(), "sched_switch".into())]
        );
    }

    /// Real tracefs: a private instance, created and removed by the test.
    #[test]
    fn live_instance_controls() {
        let root = Tracefs::discover().expect("tracefs must be mounted (tests run as root)");
        let name = "tbx_test_tracefs";
        let _ = root.remove_instance(name);
        let t = root.create_instance(name).unwrap();
        let result = std::panic::catch_unwind(|| {
            t.set_buffer_size_kb(64).unwrap();
            // The kernel rounds up to whole pages of 4080 data bytes.
            let kb = t.buffer_size_kb().unwrap();
            assert!((64..72).contains(&kb), "{kb}");
            t.set_tracing_on(false).unwrap();
            assert!(!t.is_tracing_on().unwrap());
            t.set_tracing_on(true).unwrap();
            assert!(t.is_tracing_on().unwrap());
            t.enable_event("sched", "sched_switch").unwrap();
            assert!(t.is_event_enabled("sched", "sched_switch").unwrap());
            assert!(t
                .read_file("set_event")
                .unwrap()
                .contains("sched:sched_switch"));
            t.disable_all_events().unwrap();
            assert!(!t.is_event_enabled("sched", "sched_switch").unwrap());
            let (_, clocks) = t.clocks().unwrap();
            assert!(clocks.iter().any(|c| c == "boot"));
            t.set_clock("boot").unwrap();
            assert_eq!(t.clocks().unwrap().0, "boot");
            t.set_buffer_percent(25).unwrap();
            assert_eq!(t.buffer_percent().unwrap(), 25);
            assert!(t.groups().unwrap().iter().any(|g| g == "sched"));
            assert!(t
                .read_format("sched", "sched_switch")
                .unwrap()
                .contains("next_pid"));
            assert_eq!(t.num_cpus().unwrap(), root.num_cpus().unwrap());
            t.write_trace_marker("hello").unwrap();
            let total: u64 = (0..t.num_cpus().unwrap())
                .map(|c| t.cpu_stats(c).unwrap().entries)
                .sum();
            assert_eq!(total, 1);
            t.reset(4).unwrap();
            let total: u64 = (0..t.num_cpus().unwrap())
                .map(|c| t.cpu_stats(c).unwrap().entries)
                .sum();
            assert_eq!(total, 0);
            assert!(!t.is_tracing_on().unwrap());
            assert_eq!(root.ring_buffer_page_size(), Some(4096));
        });
        root.remove_instance(name).unwrap();
        result.unwrap();
    }
}

//! Per-cpu readers of `per_cpu/cpuN/trace_pipe_raw`.
//!
//! Each cpu has a worker thread that sleeps until the kernel has pages for
//! it, then moves whole ring-buffer pages, without copying, through a
//! private landing pipe into a staging pipe. The main loop calls
//! [`FtraceReader::drain`] every drain period to read staged pages and
//! hand them to the parser.
//!
//! Kernel behaviour this relies on (measured on 6.x):
//! * splice moves only whole pages; a partial page gives EAGAIN and must
//!   be fetched with `read()`;
//! * poll() on trace_pipe_raw reports it readable once `buffer_percent`
//!   of the cpu buffer holds unread pages; with `buffer_percent` 0, or on
//!   kernels without it, as soon as anything (a partial page) is there.
//!   A blocking splice waits the same way, and with `buffer_percent` 0
//!   returns 0 at once, over and over, on a partial page;
//! * a tracefs instance cannot be removed while any of its files is open;
//! * a splice into a pipe holds the pipe's lock while it runs, so the
//!   worker splices into a private landing pipe and moves pages on to the
//!   staging pipe main reads (a relic of blocking splices, which held it
//!   for as long as they waited; now the hold is short).
//!
//! So a worker sleeps in poll() on the file (and on a waker that main uses
//! for park, stop and room) and takes pages with non-blocking splices: it
//! wakes when the fill level is reached or after its quiet wait, never per
//! page. Where poll() proves to fire on partial pages, the worker naps
//! instead (briefly while data flows, a drain period when quiet).
//!
//! Quiet machines: with a [`DataNotify`] (the daemon's readers), the quiet
//! wait is [`QUIET_WAIT`] rather than the drain period (unless a session
//! set its own period: [`FtraceReader::allow_quiet`]), and main may sleep
//! until just after the workers' next quiet end while its pace is quiet
//! ([`FtraceReader::set_main_idle`], [`FtraceReader::until_quiet_end`]);
//! a worker woken by the fill level wakes main through the notify, so a
//! burst is drained at once, and an idle session wakes each worker and
//! main once per quiet wait.
//!
//! If splice is refused (EINVAL and friends) a cpu falls back to
//! non-blocking `read()` of one page at a time from the main thread.

use std::fs::File;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::page_arena::PageArena;
use super::sys::{self, Waker, Woken};
use super::tracefs::Tracefs;

/// Most pages one cpu hands out per drain (like traced_probes' 256); the
/// caller may ask for fewer (see [`FtraceReader::drain_up_to`]).
pub const MAX_READ_PAGES_PER_DRAIN: usize = 256;

/// Size asked for the landing and staging pipes (the default
/// pipe-max-size).
const STAGING_PIPE_BYTES: usize = 1 << 20;

/// Most bytes asked of one read() of the staging pipe.
const STAGED_READ_BYTES: usize = 256 << 10;

/// Pages parsed per step of a drain: small enough (128 KiB) to stay in
/// cache between the copy out of the kernel and the parser.
const DRAIN_CHUNK_PAGES: usize = 32;

/// Bytes asked of one non-blocking splice (the kernel moves whole pages,
/// as many as are ready and fit in the pipe).
const SPLICE_BATCH_BYTES: usize = 256 << 10;

/// Longest pause between splice batches while data flows.
const MAX_BATCH_PAUSE: Duration = Duration::from_millis(10);

/// Data moved this recently counts as still flowing.
const FLOWING: Duration = Duration::from_millis(200);

/// Longest sleep of a worker (and of main's drain timer) while its cpu is
/// quiet, when the reader has a [`DataNotify`]: data leaves the kernel once
/// `buffer_percent` of a cpu buffer is filled, or at the latest this often
/// (pids reach process_stats within it).
pub const QUIET_WAIT: Duration =
    Duration::from_millis(crate::schema::ftrace_reading::QUIET_WAIT_MS);

/// Wakes main (from a worker thread) when pages are staged while main
/// sleeps its quiet wait.
pub type DataNotify = Arc<dyn Fn() + Send + Sync>;

/// poll() said "readable" this many times in a row and splice found no
/// whole page: it fires on partial pages here.
const PARTIAL_FIRES: u32 = 3;

#[derive(Debug, Default)]
struct WorkerState {
    stop: bool,
    /// Main wants the worker parked, its pages all handed over.
    park: bool,
    parked: bool,
    /// The worker waits for room in its full staging pipe.
    stalled: bool,
    /// The worker gave up on splice; main reads with read().
    fallback: bool,
    pages_spliced: u64,
    /// Times the worker woke from a sleep (for tests and tuning).
    wakeups: u64,
}

struct Shared {
    state: Mutex<WorkerState>,
    /// Main waits here for `parked`, a parked worker for `!park`.
    cv: Condvar,
    /// Rouses a worker sleeping in [`sys::sleep_on`].
    waker: Waker,
    /// Naps while data flows or the staging pipe is full: the drain period.
    idle_wait: Duration,
    /// Longest sleep on the file while quiet when `quiet_allowed`
    /// ([`QUIET_WAIT`] or the drain period).
    quiet_wait: Duration,
    /// Main allows the long quiet wait (no session asked for its own drain
    /// period); shared by the cpus of a reader.
    quiet_allowed: Arc<AtomicBool>,
    /// Quiet waits end on multiples of `quiet_wait` since this instant, the
    /// same for every cpu of a reader: their wakeups come together, and
    /// main drains them in one pass.
    quiet_epoch: Instant,
    /// How main sleeps; shared by the cpus of a reader.
    main: Arc<MainSleep>,
    notify: Option<DataNotify>,
}

/// Main's side of the quiet waits, shared by the cpus of a reader.
#[derive(Debug, Default)]
struct MainSleep {
    /// Set by main when it sleeps long: until just after the next quiet
    /// end, when it reads what the workers staged there. The first worker
    /// that stages pages woken by the fill level clears it and calls
    /// `notify`.
    idle: AtomicBool,
    /// The last quiet end (multiples of the quiet wait since the epoch)
    /// main had passed when it last began to read: a worker staging at a
    /// quiet end main has already read past wakes it.
    read_after: std::sync::atomic::AtomicU64,
}

/// Where the grid of quiet ends (every `wait` since `epoch`) stands now:
/// how many ends have passed, and the time to the next one.
fn quiet_grid(epoch: Instant, wait: Duration) -> (u64, Duration) {
    let q = (wait.as_micros() as u64).max(1);
    let t = epoch.elapsed().as_micros() as u64;
    (t / q, Duration::from_micros(q - t % q))
}

impl Shared {
    /// How long to sleep on the file while quiet: to the next multiple of
    /// the quiet wait (at least half a wait away), or the drain period.
    fn quiet(&self) -> Duration {
        if !self.quiet_allowed.load(Ordering::Relaxed) || self.quiet_wait <= self.idle_wait {
            return self.idle_wait;
        }
        let to_next = quiet_grid(self.quiet_epoch, self.quiet_wait).1;
        if to_next < self.quiet_wait / 2 {
            to_next + self.quiet_wait
        } else {
            to_next
        }
    }

    /// Pages were staged: wakes main if it sleeps long, or whatever it
    /// does if `now` (a partial page: its events should not wait for
    /// main's next tick too). Not at a quiet end (`at_quiet_end`) main
    /// sleeps to: it wakes just after it by itself, unless it already
    /// read past it.
    fn staged(&self, now: bool, at_quiet_end: bool) {
        let Some(n) = &self.notify else {
            return;
        };
        if at_quiet_end && self.main.idle.load(Ordering::SeqCst) {
            // The quiet end this is (the nearest one).
            let (passed, to_next) = quiet_grid(self.quiet_epoch, self.quiet_wait);
            let end = passed + u64::from(to_next <= self.quiet_wait / 2);
            if self.main.read_after.load(Ordering::SeqCst) < end {
                return;
            }
        }
        if self.main.idle.swap(false, Ordering::AcqRel) || now {
            n();
        }
    }

    fn lock(&self) -> MutexGuard<'_, WorkerState> {
        // A worker that panicked holding the lock leaves plain flags behind.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets a flag the worker must see now and rouses it.
    fn signal(&self, set: impl FnOnce(&mut WorkerState)) {
        set(&mut self.lock());
        self.cv.notify_all();
        self.waker.wake();
    }
}

/// Reader of one cpu.
struct CpuReader {
    cpu: usize,
    /// trace_pipe_raw, non-blocking: for read() of partial pages.
    raw_nb: File,
    staging_r: File,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// Bytes read from the staging pipe not yet forming a whole page.
    carry: Vec<u8>,
}

fn is_splice_refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL) | Some(libc::ENOSYS) | Some(libc::EBADF) | Some(libc::EOPNOTSUPP)
    )
}

/// The worker's private pipe: splices from the kernel land here, and
/// pages move on to the staging pipe with pipe-to-pipe splices.
struct Landing {
    r: File,
    w: File,
    /// Bytes sitting in the landing pipe.
    bytes: usize,
}

impl Landing {
    /// Moves landed pages to the staging pipe until it is full. Returns
    /// true when everything moved.
    fn forward(&mut self, staging_w: &File) -> bool {
        let flags = sys::SPLICE_F_MOVE | sys::SPLICE_F_NONBLOCK;
        while self.bytes > 0 {
            match sys::splice(&self.r, staging_w, self.bytes, flags) {
                Ok(0) => break,
                Ok(n) => self.bytes -= n.min(self.bytes),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        self.bytes == 0
    }
}

/// What one round of non-blocking splices found.
enum Take {
    Pages(u64),
    /// No whole page (EAGAIN), or the file reports end of data.
    Nothing,
    Refused,
    /// Offline cpu (ENODEV) or other trouble: nothing to read here now.
    Trouble,
}

/// Splices every whole page that is ready on to the staging pipe, through
/// the landing pipe, until no whole page is left or the staging pipe is
/// full.
fn take_pages(raw: &File, landing: &mut Landing, staging_w: &File, page_size: usize) -> Take {
    let flags = sys::SPLICE_F_MOVE | sys::SPLICE_F_NONBLOCK;
    let mut moved = 0u64;
    loop {
        match sys::splice(raw, &landing.w, SPLICE_BATCH_BYTES, flags) {
            Ok(0) => break,
            Ok(n) => {
                landing.bytes += n;
                moved += n.div_ceil(page_size) as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // No whole page left, or the landing pipe is full: go again
            // once the landed pages moved on.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if landing.bytes == 0 || !landing.forward(staging_w) {
                    break;
                }
            }
            Err(e) if moved == 0 && is_splice_refused(&e) => return Take::Refused,
            Err(_) if moved == 0 => return Take::Trouble,
            Err(_) => break,
        }
    }
    landing.forward(staging_w);
    if moved > 0 {
        Take::Pages(moved)
    } else {
        Take::Nothing
    }
}

/// The page a worker read() but could not yet put in the staging pipe (it
/// goes before anything spliced later).
#[derive(Default)]
struct Partial {
    pending: Vec<u8>,
}

/// Most partial-page reads per period wakeup (one is the usual: splice
/// took the whole pages).
const PARTIAL_READS: usize = 4;

impl Partial {
    /// Writes the pending page on; true once nothing is pending.
    fn flush(&mut self, staging_w: &File) -> bool {
        while !self.pending.is_empty() {
            match (&*staging_w).write(&self.pending) {
                Ok(0) => return false,
                Ok(n) => {
                    self.pending.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        true
    }

    /// Reads what the kernel holds of a page not yet full (splice takes
    /// only whole pages) and stages it, padded to a page, so events of a
    /// quiet cpu leave the kernel within a period rather than sitting
    /// there until a flush (or dying with traced_probes). Returns the
    /// pages read.
    fn take(&mut self, raw: &File, staging_w: &File, page_size: usize) -> u64 {
        let mut pages = 0;
        for _ in 0..PARTIAL_READS {
            if !self.flush(staging_w) {
                break;
            }
            self.pending.resize(page_size, 0);
            match (&*raw).read(&mut self.pending) {
                Ok(n) if n > 0 => {
                    self.pending[n.min(page_size)..].fill(0);
                    pages += 1;
                }
                _ => {
                    self.pending.clear();
                    break;
                }
            }
        }
        self.flush(staging_w);
        pages
    }
}

/// Sleeps up to `d` (on `raw`'s readiness too, if given) unless main
/// wants the worker for park or stop. Returns what woke it.
fn sleep(shared: &Shared, raw: Option<&File>, d: Duration) -> Woken {
    {
        let st = shared.lock();
        if st.park || st.stop {
            return Woken::Waker;
        }
    }
    let woken = sys::sleep_on(&shared.waker, raw, d);
    shared.lock().wakeups += 1;
    woken
}

fn worker(raw: File, staging_w: File, shared: Arc<Shared>, page_size: usize, buffer_pages: usize) {
    let mut landing = match sys::pipe() {
        Ok((r, w)) => {
            let _ = sys::set_pipe_size(&w, STAGING_PIPE_BYTES);
            Landing { r, w, bytes: 0 }
        }
        Err(_) => {
            shared.signal(|st| st.fallback = true);
            return;
        }
    };
    let mut last_pages = Instant::now();
    // poll() said readable before the last take (and how often in a row
    // that found nothing), and whether it is known to fire on partial
    // pages.
    let mut polled_ready = false;
    let mut empty_fires = 0;
    let mut fires_on_partial = false;
    let mut partial = Partial::default();
    // The last sleep was a whole period (quiet wait or drain period) that
    // ran out: time to take a partial page too.
    let mut period_ran_out = false;
    let period_sleep = |raw: Option<&File>, d: Duration| -> (Woken, bool) {
        let w = sleep(&shared, raw, d);
        (w, w == Woken::Timeout && d >= shared.idle_wait)
    };
    loop {
        {
            let mut st = shared.lock();
            while st.park && !st.stop {
                // Hand over everything before parking: main reads the
                // staging pipe meanwhile, so this makes progress.
                if !landing.forward(&staging_w) {
                    drop(st);
                    std::thread::sleep(Duration::from_millis(1));
                    st = shared.lock();
                    continue;
                }
                st.parked = true;
                shared.cv.notify_all();
                st = shared.cv.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            st.parked = false;
            if st.stop {
                return;
            }
        }
        if !partial.flush(&staging_w) || !landing.forward(&staging_w) {
            // Staging pipe full: wait for the main thread to drain it.
            shared.lock().stalled = true;
            sleep(&shared, None, shared.idle_wait);
            shared.lock().stalled = false;
            continue;
        }
        let take = take_pages(&raw, &mut landing, &staging_w, page_size);
        let was_polled_ready = std::mem::take(&mut polled_ready);
        let at_quiet_end = std::mem::take(&mut period_ran_out);
        if at_quiet_end
            && landing.bytes == 0
            && matches!(take, Take::Pages(_) | Take::Nothing)
            && partial.take(&raw, &staging_w, page_size) > 0
        {
            shared.staged(true, true);
        }
        match take {
            Take::Pages(moved) => {
                empty_fires = 0;
                shared.lock().pages_spliced += moved;
                let now = Instant::now();
                let since = now - last_pages;
                last_pages = now;
                // Pages staged after a timeout wake main too: data leaves
                // traced_probes within a quiet wait.
                shared.staged(false, at_quiet_end);
                if !fires_on_partial {
                    // The kernel wakes us at the fill level: pages arrive
                    // in batches of about that size, or per quiet wait.
                    let (w, ran_out) = period_sleep(Some(&raw), shared.quiet());
                    polled_ready = w == Woken::File;
                    period_ran_out = ran_out;
                } else {
                    // Data is flowing: let pages pile up for a moment
                    // instead of waking for a few pages at a time.
                    let pause = batch_pause(moved, since, buffer_pages);
                    if !pause.is_zero() {
                        sleep(&shared, None, pause);
                    }
                }
            }
            Take::Nothing => {
                if was_polled_ready {
                    empty_fires += 1;
                    fires_on_partial |= empty_fires >= PARTIAL_FIRES;
                }
                if fires_on_partial {
                    // While data flows the next page is a moment away: a
                    // short nap, not a whole idle period (pages would pile
                    // up in the kernel meanwhile and be overwritten).
                    let d = if last_pages.elapsed() < FLOWING {
                        MAX_BATCH_PAUSE.min(shared.idle_wait)
                    } else {
                        shared.idle_wait
                    };
                    period_ran_out = period_sleep(None, d).1;
                } else {
                    let (w, ran_out) = period_sleep(Some(&raw), shared.quiet());
                    polled_ready = w == Woken::File;
                    period_ran_out = ran_out;
                }
            }
            Take::Refused => {
                shared.signal(|st| st.fallback = true);
                return;
            }
            Take::Trouble => {
                sleep(&shared, None, shared.idle_wait);
            }
        }
    }
}

/// How long a worker waits after moving `moved` pages, `since` it last
/// moved pages, before splicing again: long enough to batch pages (at most
/// [`MAX_BATCH_PAUSE`]), short enough that at the rate just seen the
/// kernel fills at most a quarter of its `buffer_pages` meanwhile.
fn batch_pause(moved: u64, since: Duration, buffer_pages: usize) -> Duration {
    let budget = (buffer_pages / 4) as u64;
    if moved == 0 || moved >= budget {
        return Duration::ZERO;
    }
    // pages/ns = moved / since; time for `budget` pages.
    let fill = since.as_nanos().saturating_mul(budget as u128) / moved as u128;
    Duration::from_nanos(fill.min(MAX_BATCH_PAUSE.as_nanos()) as u64)
}

impl CpuReader {
    #[allow(clippy::too_many_arguments)]
    fn start(
        tracefs: &Tracefs,
        cpu: usize,
        page_size: usize,
        buffer_pages: usize,
        idle: Duration,
        mode: ReaderMode,
        main: &Arc<MainSleep>,
        quiet_allowed: &Arc<AtomicBool>,
        quiet_epoch: Instant,
        notify: Option<DataNotify>,
    ) -> io::Result<Self> {
        let path = tracefs.trace_pipe_raw_path(cpu);
        let raw_nb = sys::open_read(&path, true)?;
        let (staging_r, staging_w) = sys::pipe()?;
        // 1 MiB is the default pipe-max-size; fine if refused.
        let _ = sys::set_pipe_size(&staging_w, STAGING_PIPE_BYTES);
        sys::set_nonblocking(&staging_r, true)?;
        // The worker's writes of partial pages must not block (splices
        // into it are non-blocking by their flags).
        sys::set_nonblocking(&staging_w, true)?;
        let state = WorkerState {
            fallback: mode == ReaderMode::Read,
            ..WorkerState::default()
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            cv: Condvar::new(),
            waker: Waker::new()?,
            idle_wait: idle,
            quiet_wait: if notify.is_some() {
                idle.max(QUIET_WAIT)
            } else {
                idle
            },
            main: main.clone(),
            quiet_allowed: quiet_allowed.clone(),
            quiet_epoch,
            notify,
        });
        let s = shared.clone();
        let thread = match mode {
            ReaderMode::Read => None,
            ReaderMode::Splice => {
                // The worker's own open file: a reader's state is per open.
                let raw = sys::open_read(&path, true)?;
                Some(
                    std::thread::Builder::new()
                        .name(format!("ftrace-cpu{cpu}"))
                        .spawn(move || worker(raw, staging_w, s, page_size, buffer_pages))?,
                )
            }
        };
        Ok(CpuReader {
            cpu,
            raw_nb,
            staging_r,
            shared,
            thread,
            carry: Vec::new(),
        })
    }

    /// Rouses the worker (to see park or stop).
    fn wake(&self) {
        self.shared.cv.notify_all();
        self.shared.waker.wake();
    }

    /// Everything of this cpu into `out` once its worker (asked to park)
    /// has parked: staged pages, then what the kernel still holds, partial
    /// pages included, at most `max_direct` pages of it.
    fn flush_into(
        &mut self,
        out: &mut PageArena,
        page_size: usize,
        fallback: bool,
        max_direct: usize,
    ) -> io::Result<()> {
        if !fallback {
            // Drain while waiting: the worker may be stuck on a full pipe.
            loop {
                self.read_staged(out, page_size, usize::MAX)?;
                let st = self.shared.lock();
                if st.parked || st.fallback || self.thread.as_ref().is_none_or(|t| t.is_finished())
                {
                    break;
                }
                let _ = self.shared.cv.wait_timeout(st, Duration::from_millis(5));
                self.wake();
            }
        }
        self.read_staged(out, page_size, usize::MAX)?;
        self.read_direct(out, page_size, max_direct)
    }

    /// Appends every whole staged page to `out` (at most `max_pages`, plus
    /// what was carried over).
    fn read_staged(
        &mut self,
        out: &mut PageArena,
        page_size: usize,
        max_pages: usize,
    ) -> io::Result<()> {
        let start = out.len();
        if !self.carry.is_empty() {
            out.extend(&self.carry);
            self.carry.clear();
        }
        let limit = max_pages.saturating_mul(page_size);
        // The staging pipe holds whole pages; reads go straight into the
        // arena, a few per full pipe. Asking for the whole pipe size at
        // once would make the arena grow past what it keeps (a flush
        // would allocate and zero megabytes to read a few pages).
        let chunk = STAGED_READ_BYTES.max(page_size);
        loop {
            let got = out.len() - start;
            if got >= limit {
                break;
            }
            match self.staging_r.read(out.spare((limit - got).min(chunk))) {
                Ok(0) => break,
                Ok(n) => out.commit(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let whole = (out.len() - start) / page_size * page_size;
        self.carry = out.split_off(start + whole);
        Ok(())
    }

    /// Appends pages fetched with read() (full or partial) to `out`, until
    /// the kernel has nothing more or `max` pages were read.
    fn read_direct(&mut self, out: &mut PageArena, page_size: usize, max: usize) -> io::Result<()> {
        for _ in 0..max {
            match self.raw_nb.read(out.spare(page_size)) {
                Ok(0) => break,
                Ok(n) => {
                    // A short read still starts with a page header; pad it so
                    // the parser sees whole pages.
                    out.spare(page_size)[n.min(page_size)..].fill(0);
                    out.commit(page_size);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Nothing left, cpu offline, or buffer being resized.
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || matches!(
                            e.raw_os_error(),
                            Some(libc::ENODEV | libc::EBUSY | libc::ENOMEM)
                        ) =>
                {
                    break
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// A periodic drain of this cpu: up to `max_pages` pages, handed to `f`
    /// [`DRAIN_CHUNK_PAGES`] at a time so each chunk is parsed while still
    /// in cache. Returns the pages handed out.
    fn drain_chunks(
        &mut self,
        buf: &mut PageArena,
        page_size: usize,
        max_pages: usize,
        fallback: bool,
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> io::Result<usize> {
        let mut got = 0;
        while got < max_pages {
            let want = DRAIN_CHUNK_PAGES.min(max_pages - got);
            buf.clear();
            self.read_staged(buf, page_size, want)?;
            if fallback {
                let have = buf.len() / page_size;
                self.read_direct(buf, page_size, want.saturating_sub(have))?;
            } else {
                // A worker waiting on a full staging pipe resumes now
                // rather than after its idle period (that would cap the
                // read rate, and the kernel would overwrite pages).
                if std::mem::take(&mut self.shared.lock().stalled) {
                    self.shared.waker.wake();
                }
            }
            let n = buf.len() / page_size;
            if n == 0 {
                break;
            }
            got += n;
            f(self.cpu, buf.data());
            if n < want {
                break;
            }
        }
        Ok(got)
    }

    fn stop(&mut self) {
        self.shared.signal(|st| st.stop = true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Counters for stats and tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReaderStats {
    pub pages_spliced: u64,
    pub cpus_in_read_mode: usize,
    /// Times the workers woke from a sleep.
    pub worker_wakeups: u64,
}

/// How pages leave the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReaderMode {
    /// Worker threads splice whole pages (falls back to `Read` per cpu if
    /// the kernel refuses splice).
    Splice,
    /// The caller's thread read()s one page at a time, non-blocking.
    Read,
}

/// Environment variable that picks the reader mode of traced_probes:
/// `read` forces the non-blocking read() fallback on every cpu (to compare
/// it with splice, e.g. in scripts/bench/ftrace.sh); anything else, or
/// unset, means splice. Daemons started by the CLI inherit it.
pub const READER_MODE_ENV: &str = "TRACEBOX_FTRACE_READER";

impl ReaderMode {
    /// The mode named by [`READER_MODE_ENV`].
    pub fn from_env() -> ReaderMode {
        ReaderMode::from_name(std::env::var(READER_MODE_ENV).ok().as_deref())
    }

    pub fn from_name(name: Option<&str>) -> ReaderMode {
        match name.map(str::trim) {
            Some("read") => ReaderMode::Read,
            _ => ReaderMode::Splice,
        }
    }
}

/// Readers for every cpu of one tracefs instance.
pub struct FtraceReader {
    cpus: Vec<CpuReader>,
    page_size: usize,
    /// Most pages read() per cpu in one flush: the ring buffer size, so a
    /// flush ends even while the kernel keeps writing.
    flush_max_pages: usize,
    buf: PageArena,
    main: Arc<MainSleep>,
    quiet_allowed: Arc<AtomicBool>,
    quiet_epoch: Instant,
    /// The workers' quiet wait (when `notifies`).
    quiet_wait: Duration,
    notifies: bool,
}

impl FtraceReader {
    /// Starts one worker per cpu. `page_size` is the ring-buffer page size
    /// (see [`Tracefs::ring_buffer_page_size`]); `drain_period` bounds how
    /// long an idle worker sleeps before retrying splice.
    pub fn start(
        tracefs: &Tracefs,
        page_size: usize,
        drain_period: Duration,
        mode: ReaderMode,
    ) -> io::Result<Self> {
        Self::start_with_notify(tracefs, page_size, drain_period, mode, None, false)
    }

    /// [`start`](Self::start) with a way to wake main: workers then sleep
    /// up to [`QUIET_WAIT`] while quiet, and main may too (see
    /// [`set_main_idle`](Self::set_main_idle)). `quiet`: they may from the
    /// start (as [`allow_quiet`](Self::allow_quiet)); a session with its
    /// own drain period must not find its workers asleep for a quiet wait.
    pub fn start_with_notify(
        tracefs: &Tracefs,
        page_size: usize,
        drain_period: Duration,
        mode: ReaderMode,
        notify: Option<DataNotify>,
        quiet: bool,
    ) -> io::Result<Self> {
        let buffer_pages = tracefs.buffer_size_kb().unwrap_or(4096) as usize * 1024 / page_size;
        let main = Arc::new(MainSleep::default());
        let quiet_allowed = Arc::new(AtomicBool::new(quiet && notify.is_some()));
        let quiet_epoch = Instant::now();
        let notifies = notify.is_some();
        let mut cpus = Vec::new();
        for cpu in 0..tracefs.num_cpus()? {
            cpus.push(CpuReader::start(
                tracefs,
                cpu,
                page_size,
                buffer_pages,
                drain_period,
                mode,
                &main,
                &quiet_allowed,
                quiet_epoch,
                notify.clone(),
            )?);
        }
        Ok(FtraceReader {
            flush_max_pages: buffer_pages + 16,
            cpus,
            page_size,
            main,
            quiet_allowed,
            quiet_epoch,
            quiet_wait: drain_period.max(QUIET_WAIT),
            notifies,
            buf: PageArena::default(),
        })
    }

    pub fn num_cpus(&self) -> usize {
        self.cpus.len()
    }

    /// Whether workers may sleep [`QUIET_WAIT`] while quiet (`false`: at
    /// most the drain period, for a session that set its own period).
    /// Workers in a quiet wait are woken when it is withdrawn.
    pub fn allow_quiet(&self, allowed: bool) {
        if self.quiet_allowed.swap(allowed, Ordering::Relaxed) && !allowed {
            self.cpus.iter().for_each(CpuReader::wake);
        }
    }

    /// Main is about to sleep until just after the workers' next quiet
    /// end ([`until_quiet_end`](Self::until_quiet_end), `true`) or is
    /// awake and about to read (`false`). Returns whether main may sleep
    /// long: every cpu has a worker that will wake it for a burst (none
    /// reads with read() from main, and a notify exists), and no page is
    /// staged already (one staged before the flag was set would wake
    /// nobody).
    pub fn set_main_idle(&self, idle: bool) -> bool {
        if !idle {
            self.main.idle.store(false, Ordering::SeqCst);
            // Workers staging at a quiet end from here on wake main.
            let passed = quiet_grid(self.quiet_epoch, self.quiet_wait).0;
            self.main.read_after.store(passed, Ordering::SeqCst);
            return false;
        }
        let can = self.notifies
            && self.cpus.iter().all(|c| {
                c.thread.as_ref().is_some_and(|t| !t.is_finished()) && !c.shared.lock().fallback
            });
        self.main.idle.store(can, Ordering::SeqCst);
        if !can {
            return false;
        }
        let staged = self
            .cpus
            .iter()
            .any(|c| !c.carry.is_empty() || sys::pipe_bytes(&c.staging_r) > 0);
        if staged {
            self.main.idle.store(false, Ordering::SeqCst);
        }
        !staged
    }

    /// Time to the workers' next quiet end, when they take quiet waits:
    /// they then stage what the kernel holds, partial pages too, and main,
    /// idle, reads it just after (one wakeup of main per quiet wait, not
    /// one per worker plus a coalescing timer).
    pub fn until_quiet_end(&self) -> Option<Duration> {
        if !self.notifies || !self.quiet_allowed.load(Ordering::Relaxed) {
            return None;
        }
        Some(quiet_grid(self.quiet_epoch, self.quiet_wait).1)
    }

    /// Memory held by the buffer pages are read into.
    pub fn read_buffer_bytes(&self) -> usize {
        self.buf.capacity()
    }

    pub fn stats(&self) -> ReaderStats {
        let mut s = ReaderStats::default();
        for c in &self.cpus {
            let st = c.shared.lock();
            s.pages_spliced += st.pages_spliced;
            s.cpus_in_read_mode += st.fallback as usize;
            s.worker_wakeups += st.wakeups;
        }
        s
    }

    /// Periodic drain: for each cpu with data, calls `f(cpu, pages)` with
    /// whole pages (possibly several times per cpu, in order). Returns the
    /// most pages one cpu handed out.
    pub fn drain(&mut self, f: &mut dyn FnMut(usize, &[u8])) -> io::Result<usize> {
        self.drain_up_to(MAX_READ_PAGES_PER_DRAIN, f)
    }

    /// [`drain`](Self::drain) handing out at most `max_pages` per cpu
    /// (1..=[`MAX_READ_PAGES_PER_DRAIN`]).
    pub fn drain_up_to(
        &mut self,
        max_pages: usize,
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> io::Result<usize> {
        let max = max_pages.clamp(1, MAX_READ_PAGES_PER_DRAIN);
        let mut busiest = 0;
        for c in &mut self.cpus {
            let fallback = c.shared.lock().fallback;
            busiest =
                busiest.max(c.drain_chunks(&mut self.buf, self.page_size, max, fallback, f)?);
        }
        Ok(busiest)
    }

    /// Flush: everything the kernel holds, including partial pages, in
    /// order (one call of `f` per cpu). Returns as [`drain`](Self::drain).
    /// A cpu's worker is parked while its partial pages are read, so that
    /// no newer page can overtake them; the other workers go on meanwhile
    /// (parked together, a busy cpu's flush left the others unread long
    /// enough for their kernel buffers to overrun).
    ///
    /// Then every cpu is topped up with what came meanwhile, all workers
    /// parked at once and nothing parsed until each was read: the cpus'
    /// data ends at nearly the same moment (a rotation cut must not leave
    /// one cpu's last events in the next file while another's stop here).
    pub fn flush(&mut self, f: &mut dyn FnMut(usize, &[u8])) -> io::Result<usize> {
        let busiest = self.flush_each(f)?;
        let ps = self.page_size;
        self.buf.clear();
        for c in &self.cpus {
            c.shared.signal(|st| st.park = true);
        }
        let mut read = Ok(());
        let mut ranges = Vec::with_capacity(self.cpus.len());
        for c in &mut self.cpus {
            let fallback = c.shared.lock().fallback;
            let start = self.buf.len();
            if read.is_ok() {
                read = c.flush_into(&mut self.buf, ps, fallback, self.flush_max_pages);
            }
            ranges.push((c.cpu, start, self.buf.len()));
        }
        for c in &self.cpus {
            c.shared.signal(|st| st.park = false);
        }
        read?;
        let mut top_up = 0;
        for (cpu, start, end) in ranges {
            if end > start {
                top_up = top_up.max((end - start) / ps);
                f(cpu, &self.buf.data()[start..end]);
            }
        }
        Ok(busiest.max(top_up))
    }

    /// Each cpu in turn: staged pages, then what the kernel holds.
    fn flush_each(&mut self, f: &mut dyn FnMut(usize, &[u8])) -> io::Result<usize> {
        let ps = self.page_size;
        let mut busiest = 0;
        for c in &mut self.cpus {
            let fallback = c.shared.lock().fallback;
            self.buf.clear();
            c.shared.signal(|st| st.park = true);
            let read = c.flush_into(&mut self.buf, ps, fallback, self.flush_max_pages);
            c.shared.signal(|st| st.park = false);
            read?;
            if !self.buf.is_empty() {
                busiest = busiest.max(self.buf.len() / ps);
                f(c.cpu, self.buf.data());
            }
        }
        Ok(busiest)
    }

    /// Stops and joins every worker. Pages still staged are dropped.
    pub fn stop(mut self) {
        self.stop_all();
    }

    fn stop_all(&mut self) {
        for c in &mut self.cpus {
            c.stop();
        }
    }
}

impl Drop for FtraceReader {
    fn drop(&mut self) {
        self.stop_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_pause_follows_the_rate_and_the_buffer() {
        let ms = Duration::from_millis;
        // 2048-page buffer (8 MiB): a quarter is 512 pages.
        // 1 page in 1 ms: 512 ms to a quarter, capped.
        assert_eq!(batch_pause(1, ms(1), 2048), MAX_BATCH_PAUSE);
        // 100 pages in 1 ms: 5.12 ms to a quarter.
        assert_eq!(batch_pause(100, ms(1), 2048), Duration::from_micros(5120));
        // Already a quarter (or nothing): no pause.
        assert_eq!(batch_pause(512, ms(1), 2048), Duration::ZERO);
        assert_eq!(batch_pause(0, ms(1), 2048), Duration::ZERO);
        // A tiny buffer never pauses.
        assert_eq!(batch_pause(1, ms(1), 3), Duration::ZERO);
        // A wakeup right after the last one: no time, no pause.
        assert_eq!(batch_pause(5, Duration::ZERO, 2048), Duration::ZERO);
    }

    #[test]
    fn reader_mode_names() {
        assert_eq!(ReaderMode::from_name(Some("read")), ReaderMode::Read);
        assert_eq!(ReaderMode::from_name(Some(" read\n")), ReaderMode::Read);
        assert_eq!(ReaderMode::from_name(Some("splice")), ReaderMode::Splice);
        assert_eq!(ReaderMode::from_name(Some("bogus")), ReaderMode::Splice);
        assert_eq!(ReaderMode::from_name(None), ReaderMode::Splice);
    }
}

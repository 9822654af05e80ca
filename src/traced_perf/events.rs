//! The perf events of a `linux.perf` config: their attributes (timebase,
//! followers, modifiers, clock, callchain scope), the names that pick
//! tracepoints and PMUs, and the group opened on one CPU with its ring.
//! Errors name the event and add what the kernel's errno usually means.

use std::os::fd::OwnedFd;

use super::config::{
    self, Event, Interval, PerfConfig, SampleClock, UnwindMode, STACK_SAMPLE_BYTES,
};
use super::sys::{self, Attr, Ring};
use super::unwind;

/// One CPU's timebase event, its followers and its ring.
pub(super) struct CpuRing {
    pub cpu: u32,
    pub fd: OwnedFd,
    pub ring: Ring,
    /// Follower events of the group `fd` leads (read with each sample).
    _followers: Vec<OwnedFd>,
    /// The leader reads with PERF_FORMAT_LOST (the kernel has it).
    pub counts_lost: bool,
    /// Sum of the LOST records read from this ring.
    pub lost_reported: u64,
}

impl CpuRing {
    /// Records the kernel lost on this ring that no LOST record reported
    /// yet (it writes one only once a later record fits): read once the
    /// event is disabled and its ring drained.
    pub fn lost_unreported(&self, members: usize) -> u64 {
        if !self.counts_lost {
            return 0;
        }
        let mut buf = vec![0u8; 8 + 16 * members];
        match sys::read_values(&self.fd, &mut buf) {
            Ok(n) => super::records::leader_lost(&buf[..n])
                .map_or(0, |l| l.saturating_sub(self.lost_reported)),
            Err(_) => 0,
        }
    }
}

fn open_error(what: &str, attr: &Attr, clock: SampleClock, e: std::io::Error) -> String {
    let software = attr.get32(0) == sys::TYPE_SOFTWARE;
    let hint = match e.raw_os_error() {
        // Only software events take a clock the kernel cannot read from
        // an NMI.
        Some(libc::EINVAL) if !software && [0, 7].contains(&clock.clockid) => {
            " (PERF_CLOCK_BOOTTIME and PERF_CLOCK_REALTIME work with software counters only; \
             leave timestamp_clock unset)"
        }
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
            " (this kernel or CPU has no such event)"
        }
        Some(libc::EACCES) | Some(libc::EPERM) => {
            " (needs root or kernel.perf_event_paranoid <= -1)"
        }
        _ => "",
    };
    format!("perf_event_open({what}): {e}{hint}")
}

fn tracepoint_id(name: &str) -> Result<u64, String> {
    let (group, event) = name
        .split_once(':')
        .ok_or_else(|| format!("tracepoint {name:?} must be GROUP:NAME"))?;
    if group.contains('/') || event.contains('/') || group.contains("..") || event.contains("..") {
        return Err(format!("bad tracepoint name {name:?}"));
    }
    for root in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        if let Ok(t) = std::fs::read_to_string(format!("{root}/events/{group}/{event}/id")) {
            return t
                .trim()
                .parse()
                .map_err(|_| format!("tracepoint {name}: bad id"));
        }
    }
    Err(format!(
        "tracepoint {name}: this kernel has no such event (or tracefs is not mounted)"
    ))
}

/// `/sys/bus/event_source/devices/PMU/type`: the perf type of a PMU named
/// by a raw event.
fn pmu_type(pmu: &str) -> Result<u32, String> {
    if pmu.contains('/') || pmu.starts_with("..") {
        return Err(format!("bad pmu_name {pmu:?}"));
    }
    let path = format!("/sys/bus/event_source/devices/{pmu}/type");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        format!("raw_event pmu_name {pmu:?}: this kernel has no such PMU ({path}: {e})")
    })?;
    text.trim()
        .parse()
        .map_err(|_| format!("raw_event pmu_name {pmu:?}: bad type in {path}"))
}

/// The attributes counting `event` where its EventModifiers say, with its
/// name for errors.
pub(super) fn event_attr(event: &Event, modifiers: &[u32]) -> Result<(Attr, String), String> {
    let (mut attr, name) = match event {
        Event::Counter(c) => {
            let (t, conf, name) =
                config::counter(*c).ok_or_else(|| format!("unknown counter {c}"))?;
            (Attr::new(t, conf), name.to_string())
        }
        Event::Tracepoint { name, .. } => (
            Attr::new(sys::TYPE_TRACEPOINT, tracepoint_id(name)?),
            name.clone(),
        ),
        Event::Raw {
            type_,
            config,
            config1,
            config2,
            pmu,
        } => {
            let type_ = if pmu.is_empty() {
                *type_
            } else {
                pmu_type(pmu)?
            };
            let mut a = Attr::new(type_, *config);
            a.set_config1(*config1);
            a.set_config2(*config2);
            (a, format!("raw event type {type_} config {config:#x}"))
        }
    };
    // Modifiers name where to count; without any, everywhere.
    if !modifiers.is_empty() {
        for (m, bit) in [
            (1, sys::FLAG_EXCLUDE_USER),
            (2, sys::FLAG_EXCLUDE_KERNEL),
            (3, sys::FLAG_EXCLUDE_HV),
        ] {
            if !modifiers.contains(&m) {
                attr.set_flags(bit);
            }
        }
    }
    Ok((attr, name))
}

/// The attributes of the timebase (the group leader) for `cfg`.
pub(super) fn attr_for(cfg: &PerfConfig) -> Result<(Attr, String), String> {
    let (mut attr, what) = event_attr(&cfg.event, &cfg.modifiers)?;
    match cfg.interval {
        Interval::Frequency(f) => {
            attr.set_flags(sys::FLAG_FREQ);
            attr.set_period_or_freq(f);
        }
        Interval::Period(p) => attr.set_period_or_freq(p),
    }
    // Every sample reads the timebase's running count (a group read, with
    // the followers if any): upstream's timebase_count is that count, and
    // trace_processor builds the counter track of each CPU from it.
    let mut st = sys::SAMPLE_TID
        | sys::SAMPLE_TIME
        | sys::SAMPLE_CPU
        | sys::SAMPLE_PERIOD
        | sys::SAMPLE_READ;
    attr.set_read_format(sys::FORMAT_GROUP | sys::FORMAT_LOST);
    // As upstream: the daemon's unwinders get the user registers and a
    // copy of the user stack; the kernel's callchain carries kernel frames,
    // and user frames only when it walks them (UNWIND_KERNEL_FRAME_POINTER).
    let kernel_walks_user = cfg.unwind == UnwindMode::KernelFramePointer;
    if cfg.callstacks && cfg.unwind.copies_stack() {
        st |= sys::SAMPLE_REGS_USER | sys::SAMPLE_STACK_USER;
        attr.set_sample_regs_user(unwind::REGS_MASK);
        attr.set_sample_stack_user(STACK_SAMPLE_BYTES);
    }
    if cfg.callstacks && (cfg.kernel_frames || kernel_walks_user) {
        st |= sys::SAMPLE_CALLCHAIN;
        if !cfg.kernel_frames {
            attr.set_flags(sys::FLAG_EXCLUDE_CALLCHAIN_KERNEL);
        }
        if !kernel_walks_user {
            attr.set_flags(sys::FLAG_EXCLUDE_CALLCHAIN_USER);
        }
    }
    attr.set_sample_type(st);
    // COMM records of exec: a process first sampled between fork and exec
    // is decided again, and its maps re-read, once it runs its program.
    attr.set_flags(
        sys::FLAG_DISABLED | sys::FLAG_SAMPLE_ID_ALL | sys::FLAG_COMM | sys::FLAG_COMM_EXEC,
    );
    attr.set_clockid(cfg.clock.clockid);
    Ok((attr, what))
}

/// The timebase (with its followers as a group) on one CPU, and its ring.
pub(super) fn open_ring(
    cfg: &PerfConfig,
    attr: &Attr,
    what: &str,
    filter: Option<&str>,
    followers: &[(Attr, String)],
    cpu: u32,
) -> Result<CpuRing, String> {
    // Kernels before 6.0 refuse PERF_FORMAT_LOST with EINVAL.
    let mut counts_lost = true;
    let fd = match sys::open_cpu(attr, cpu, None) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            let mut a = *attr;
            a.set_read_format(sys::FORMAT_GROUP);
            counts_lost = false;
            sys::open_cpu(&a, cpu, None)
        }
        r => r,
    }
    .map_err(|e| open_error(what, attr, cfg.clock, e))?;
    if let Some(f) = filter {
        sys::set_filter(&fd, f).map_err(|e| format!("tracepoint filter {f:?}: {e}"))?;
    }
    let mut members = Vec::with_capacity(followers.len());
    for (a, name) in followers {
        let m = sys::open_cpu(a, cpu, Some(&fd));
        members.push(m.map_err(|e| open_error(&format!("follower {name}"), a, cfg.clock, e))?);
    }
    let ring =
        Ring::map(&fd, cfg.ring_buffer_pages).map_err(|e| format!("mmap of the perf ring: {e}"))?;
    Ok(CpuRing {
        cpu,
        fd,
        ring,
        _followers: members,
        counts_lost,
        lost_reported: 0,
    })
}

//! Turns raw ring-buffer pages into `FtraceEventBundle` trace packets.
//!
//! Pure: pages in, protobuf out through a [`PacketWriter`], which the
//! data source backs with a TraceWriter (and tests with memory).

use super::compact_sched::{
    CompactSchedBuffer, CompactSchedFormat, SwitchFormat, INTERNER_THRESHOLD,
};
use super::format::PageHeaderLayout;
use super::kprobes::{TraceType, FTRACE_EVENT_KPROBE};
use super::ksyms::LazySymbols;
use super::packet_buf::PacketBuf;
use super::page_parser::{parse_page, PageSink, ParseError};
use super::print_filter::PrintFilter;
use super::table::ftrace_event;
use super::translate::{
    read_int, until_nul, write_generic_fields, write_typed_fields, KernelAddrs, Metadata,
    PrintLayout, SharedKernelAddrs, Target, TranslationTable,
};
use crate::protozero::{
    begin_nested, end_nested, put_bytes, put_varint, LenSlot, Stream, WIRE_LEN,
};

/// `TracePacket.ftrace_events`.
pub const TRACE_PACKET_FTRACE_EVENTS: u32 = 1;

mod bundle_field {
    pub const CPU: u32 = 1;
    pub const EVENT: u32 = 2;
    pub const LOST_EVENTS: u32 = 3;
    pub const FTRACE_CLOCK: u32 = 5;
    pub const FTRACE_TIMESTAMP: u32 = 6;
    pub const BOOT_TIMESTAMP: u32 = 7;
    pub const ERROR: u32 = 8;
    pub const PREVIOUS_BUNDLE_END_TIMESTAMP: u32 = 10;
}

/// Hands out trace packets.
pub trait PacketWriter {
    type Stream: Stream;
    /// Finishes the current packet, if any, and starts a new one.
    fn new_packet(&mut self);
    /// The current packet. Only called after [`new_packet`](Self::new_packet).
    fn stream(&mut self) -> &mut Self::Stream;
    /// Finishes the current packet.
    fn finish_packet(&mut self);
}

/// A bundle's events are encoded into [`CpuState::out`] and move on into
/// the packet (the shared-memory chunk) whenever it holds this much, at an
/// event boundary: the encoder's buffer stays a few KiB, hot in the L1
/// cache, instead of growing to the whole bundle (MBs at high rates) and
/// being copied cold into the chunk at the end.
const SPILL_BYTES: usize = 4 << 10;

/// Which event ids a data source wants (a bitmap over ftrace ids).
#[derive(Debug, Default, Clone)]
pub struct EventFilter {
    bits: Vec<u64>,
    /// `print_filter`: which ftrace/print messages to keep.
    pub print: Option<PrintFilter>,
    /// `syscall_events`: which raw_syscalls records to keep.
    pub syscalls: Option<super::syscalls::SyscallFilter>,
    /// `kprobe_events`: the `KprobeEvent.type` of each kprobe's ftrace id
    /// (a few entries).
    pub kprobes: Vec<(u32, TraceType)>,
}

impl EventFilter {
    pub fn enable(&mut self, id: u32) {
        let (w, b) = (id as usize / 64, id % 64);
        if self.bits.len() <= w {
            self.bits.resize(w + 1, 0);
        }
        self.bits[w] |= 1 << b;
    }

    /// The trace type this data source gives kprobe `id`.
    pub fn kprobe_type(&self, id: u32) -> Option<TraceType> {
        self.kprobes.iter().find(|(i, _)| *i == id).map(|(_, t)| *t)
    }

    pub fn is_enabled(&self, id: u32) -> bool {
        self.bits
            .get(id as usize / 64)
            .is_some_and(|w| w & (1 << (id % 64)) != 0)
    }
}

/// The trace clock, when it is not `boot` (`FtraceClock` enum values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSnapshot {
    pub ftrace_clock: u32,
    pub ftrace_timestamp: i64,
    pub boot_timestamp: i64,
}

/// Read-only inputs of one data source.
pub struct BundleContext<'a> {
    pub table: &'a TranslationTable,
    pub filter: &'a EventFilter,
    /// `Some` when compact sched is on and the kernel formats allow it.
    pub compact_sched: Option<CompactSchedFormat>,
    /// sched_switch's layout when the kernel's format is as expected (with
    /// compact sched on or off): every switch is checked against the one
    /// before it on its cpu.
    pub sched_switch: Option<SwitchFormat>,
    pub clock: Option<ClockSnapshot>,
    /// Set with `symbolize_ksyms`: new kernel addresses of a bundle are
    /// emitted as `interned_data.kernel_symbols` in its packet (the first
    /// bundle that has any waits for the table if it is still loading).
    pub ksyms: Option<&'a LazySymbols>,
}

/// Per (data source, cpu) state kept across read passes.
#[derive(Debug, Default)]
pub struct CpuState {
    /// Timestamp of the last event written on this cpu (0 before any).
    pub bundle_end_timestamp: u64,
    pub compact: CompactSchedBuffer,
    pub metadata: Metadata,
    /// Every parse error seen (for `FtraceStats.ftrace_parse_errors`).
    pub parse_errors: Vec<ParseError>,
    /// The events of the bundle being encoded not yet moved into its
    /// packet (kept to reuse its allocation).
    pub out: PacketBuf,
    /// next_pid of the last sched_switch on this cpu (`None` at the start
    /// and after lost events).
    pub last_switched_to: Option<i32>,
    /// Switches away from a task that no recorded switch had switched to:
    /// events the kernel never recorded (some kernels skip the switch out
    /// of a cpu's idle task). Such a switch is written in full, prev_pid
    /// included, so trace_processor flags it too.
    pub unrecorded_switches: u64,
}

impl CpuState {
    /// The state of one cpu of a data source whose kernel addresses are
    /// interned in `kernel` (one table per sequence, shared by its cpus).
    pub fn on_sequence(kernel: &SharedKernelAddrs) -> CpuState {
        let mut s = CpuState::default();
        s.metadata.kernel = kernel.clone();
        s
    }
}

/// What one call to [`write_pages`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WriteSummary {
    pub pages: usize,
    pub events: usize,
    pub bundles: usize,
    pub errors: usize,
}

struct Bundler<'a, W: PacketWriter> {
    w: &'a mut W,
    ctx: &'a BundleContext<'a>,
    state: &'a mut CpuState,
    cpu: u32,
    /// The open bundle: its length slot in the packet, and the packet
    /// position its body starts at.
    open: Option<(LenSlot, u64)>,
    /// The next bundle must carry lost_events.
    lost_pending: bool,
    summary: WriteSummary,
}

impl<W: PacketWriter> Bundler<'_, W> {
    /// Opens a bundle (and its packet) unless one is open.
    #[inline(always)]
    fn ensure_open(&mut self) {
        if self.open.is_none() {
            self.open_bundle();
        }
    }

    #[inline(never)]
    fn open_bundle(&mut self) {
        self.w.new_packet();
        let p = self.w.stream();
        // TracePacket.ftrace_events: tag, then a length filled at close.
        p.write(&[(TRACE_PACKET_FTRACE_EVENTS << 3 | WIRE_LEN) as u8]);
        let slot = p.reserve_len();
        let body = p.position();
        let s = &mut self.state.out;
        s.clear();
        s.varint(bundle_field::CPU, self.cpu as u64);
        if self.lost_pending {
            s.varint(bundle_field::LOST_EVENTS, 1);
        }
        let prev = self.state.bundle_end_timestamp;
        s.varint(bundle_field::PREVIOUS_BUNDLE_END_TIMESTAMP, prev);
        if let Some(c) = self.ctx.clock {
            s.varint(bundle_field::FTRACE_CLOCK, c.ftrace_clock as u64);
            s.varint(bundle_field::FTRACE_TIMESTAMP, c.ftrace_timestamp as u64);
            s.varint(bundle_field::BOOT_TIMESTAMP, c.boot_timestamp as u64);
        }
        self.open = Some((slot, body));
        self.lost_pending = false;
        self.summary.bundles += 1;
    }

    /// Moves what the encoder holds into the packet.
    fn spill(&mut self) {
        let s = &mut self.state.out;
        if !s.is_empty() {
            self.w.stream().write(s.as_bytes());
            s.clear();
        }
    }

    fn close(&mut self) {
        if let Some((slot, body)) = self.open.take() {
            let s = &mut self.state.out;
            self.state.compact.write_and_reset(s);
            self.spill();
            let p = self.w.stream();
            let len = p.position() - body;
            p.fill_len(slot, len as u32);
            let s = &mut self.state.out;
            let mut addrs = self.state.metadata.kernel.borrow_mut();
            if let Some(k) = self.ctx.ksyms {
                write_kernel_symbols(s, k, &mut addrs);
            }
            if std::mem::take(&mut addrs.clear_pending) && !addrs.sequence_started {
                s.varint(TRACE_PACKET_SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED);
                addrs.sequence_started = true;
            }
            drop(addrs);
            self.spill();
            self.w.finish_packet();
        }
    }

    fn error(&mut self, timestamp: u64, e: ParseError) {
        self.state.parse_errors.push(e);
        self.summary.errors += 1;
        self.ensure_open();
        let s = &mut self.state.out;
        let n = s.begin(bundle_field::ERROR);
        s.varint(1, timestamp);
        s.varint(2, e.status() as u64);
        s.end(n);
    }

    /// Whether a sched_switch follows on from the previous one on this
    /// cpu (its prev_pid is the task switched to last).
    #[inline]
    fn switch_follows_on(&mut self, rec: &[u8], f: &SwitchFormat) -> bool {
        let (Some(prev), Some(next)) = (read_int(rec, f.prev_pid, 4), read_int(rec, f.next_pid, 4))
        else {
            return true;
        };
        let follows = self.state.last_switched_to.is_none_or(|p| p == prev as i32);
        self.state.last_switched_to = Some(next as i32);
        if !follows {
            self.state.unrecorded_switches += 1;
        }
        follows
    }

    #[inline]
    fn write_event(&mut self, ts: u64, id: u32, rec: &[u8]) -> Result<(), ParseError> {
        let ctx = self.ctx;
        let in_full = match &ctx.sched_switch {
            Some(f) if id == f.event_id => !self.switch_follows_on(rec, f),
            _ => false,
        };
        if let Some(c) = ctx.compact_sched.as_ref().filter(|_| !in_full) {
            // The tasks switched to and woken are the pids that matter most
            // for the process tree; hand them over as for full events.
            let task_pid = if id == c.switch.event_id {
                Some(c.switch.next_pid)
            } else if id == c.waking.event_id {
                Some(c.waking.pid)
            } else {
                None
            };
            if let Some(off) = task_pid {
                if let Some(pid) = read_int(rec, off, 4).filter(|p| *p > 0) {
                    self.state.metadata.push_pid(pid as i32);
                }
                self.ensure_open();
                return if id == c.switch.event_id {
                    self.state.compact.add_switch(ts, rec, &c.switch)
                } else {
                    self.state.compact.add_waking(ts, rec, &c.waking)
                };
            }
        }
        if let Some(p) = &ctx.table.print_layout {
            if id == p.ftrace_id {
                return self.write_print(ts, rec, p);
            }
        }
        let Some(ev) = ctx.table.event(id) else {
            return Ok(());
        };
        if let Some(pf) = &ctx.filter.print {
            // ftrace/print is the only event typed as FtraceEvent.print: an
            // integer compare instead of two string compares per event.
            if ev.target == Target::Typed(ftrace_event::PRINT) && !print_allowed(pf, ev, rec) {
                return Ok(());
            }
        }
        let pid = read_int(rec, ctx.table.common_pid_offset as usize, 4);
        self.ensure_open();
        let s = &mut self.state.out;
        let meta = &mut self.state.metadata;
        let n = s.begin_small(bundle_field::EVENT);
        s.varint(ftrace_event::TIMESTAMP, ts);
        if let Some(pid) = pid {
            s.varint(ftrace_event::PID, pid as u32 as u64);
            meta.push_pid(pid as i32);
        }
        let field = match ev.target {
            Target::Typed(f) => f,
            Target::Generic => ftrace_event::GENERIC,
            Target::Kprobe => FTRACE_EVENT_KPROBE,
        };
        let p = s.begin_small(field);
        let ok = match ev.target {
            Target::Typed(_) => write_typed_fields(s, ev, rec, ctx.table, meta),
            Target::Generic => write_generic_fields(s, ev, rec, ctx.table, meta),
            Target::Kprobe => {
                s.bytes(1, ev.name.as_bytes());
                if let Some(t) = ctx.filter.kprobe_type(id) {
                    s.varint(2, t as u64);
                }
                Some(())
            }
        };
        // One event is small: shortest lengths save 6 bytes of ~55.
        s.end_small(p);
        s.end_small(n);
        ok.ok_or(ParseError::InvalidEvent)
    }
}

impl<W: PacketWriter> Bundler<'_, W> {
    /// ftrace/print in its usual layout: the same bytes the generic path
    /// writes, without the per-field dispatch.
    #[inline]
    fn write_print(&mut self, ts: u64, rec: &[u8], p: &PrintLayout) -> Result<(), ParseError> {
        let buf = rec
            .get(p.buf_offset as usize..)
            .map(until_nul)
            .ok_or(ParseError::InvalidEvent);
        if let Some(pf) = &self.ctx.filter.print {
            if !pf.allows(buf.unwrap_or(&[])) {
                return Ok(());
            }
        }
        let pid = read_int(rec, self.ctx.table.common_pid_offset as usize, 4);
        self.ensure_open();
        let s = &mut self.state.out;
        let n = s.begin_small(bundle_field::EVENT);
        s.varint_inline(ftrace_event::TIMESTAMP, ts);
        if let Some(pid) = pid {
            s.varint_inline(ftrace_event::PID, pid as u32 as u64);
            self.state.metadata.push_pid(pid as i32);
        }
        let m = s.begin_small(ftrace_event::PRINT);
        if let Ok(b) = buf {
            s.bytes_inline(p.buf_proto_field, b);
        }
        s.end_small(m);
        s.end_small(n);
        buf.map(|_| ())
    }
}

impl<W: PacketWriter> PageSink for Bundler<'_, W> {
    #[inline]
    fn on_event(&mut self, ts: u64, id: u16, rec: &[u8]) -> Result<(), ParseError> {
        if !self.ctx.filter.is_enabled(id as u32) {
            return Ok(());
        }
        if let Some(sf) = &self.ctx.filter.syscalls {
            if !sf.allows(id as u32, rec) {
                return Ok(());
            }
        }
        let r = self.write_event(ts, id as u32, rec);
        if self.state.out.len() >= SPILL_BYTES {
            self.spill();
        }
        r?;
        self.state.bundle_end_timestamp = ts;
        self.summary.events += 1;
        Ok(())
    }
}

/// Applies `print_filter` to an ftrace/print record (its `buf` field).
fn print_allowed(pf: &PrintFilter, ev: &super::translate::EventTranslation, rec: &[u8]) -> bool {
    let Some(f) = ev.fields.iter().find(|f| f.name == "buf") else {
        return true;
    };
    let start = f.offset as usize;
    let buf = rec
        .get(start..)
        .map(super::translate::until_nul)
        .unwrap_or(&[]);
    pf.allows(buf)
}

/// `TracePacket` fields for interning.
const TRACE_PACKET_INTERNED_DATA: u32 = 12;
const TRACE_PACKET_SEQUENCE_FLAGS: u32 = 13;
const INTERNED_DATA_KERNEL_SYMBOLS: u32 = 26;
const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u64 = 2;

/// Appends `interned_data.kernel_symbols` for the addresses interned since
/// the last call (names not in kallsyms are left out) and the sequence
/// flags: the first such packet of a sequence clears incremental state.
fn write_kernel_symbols<S: Stream>(s: &mut S, k: &LazySymbols, addrs: &mut KernelAddrs) {
    if addrs.written >= addrs.addrs.len() {
        return;
    }
    let k = k.get();
    let mut name = String::new();
    let n = begin_nested(s, TRACE_PACKET_INTERNED_DATA);
    for (i, &a) in addrs.addrs.iter().enumerate().skip(addrs.written) {
        if let Some(name) = k.lookup_into(a, &mut name) {
            let e = begin_nested(s, INTERNED_DATA_KERNEL_SYMBOLS);
            put_varint(s, 1, i as u64 + 1);
            put_bytes(s, 2, name.as_bytes());
            end_nested(s, e);
        }
    }
    end_nested(s, n);
    let flags = if addrs.sequence_started {
        SEQ_NEEDS_INCREMENTAL_STATE
    } else {
        SEQ_INCREMENTAL_STATE_CLEARED
    };
    put_varint(s, TRACE_PACKET_SEQUENCE_FLAGS, flags);
    addrs.sequence_started = true;
    addrs.written = addrs.addrs.len();
}

/// Parses `pages` (whole pages of `layout.page_size` bytes each, the
/// last one possibly shorter) read from `cpu` and writes bundles. A new
/// bundle starts when a page reports lost events or too many comms are
/// interned. Errors become bundle `error` entries and stop only their page.
pub fn write_pages<W: PacketWriter>(
    w: &mut W,
    cpu: u32,
    pages: &[u8],
    layout: &PageHeaderLayout,
    ctx: &BundleContext<'_>,
    state: &mut CpuState,
) -> WriteSummary {
    let mut b = Bundler {
        w,
        ctx,
        state,
        cpu,
        open: None,
        lost_pending: false,
        summary: WriteSummary::default(),
    };
    for page in pages.chunks(layout.page_size.max(1)) {
        b.summary.pages += 1;
        let header = super::page_parser::parse_page_header(page, layout);
        let lost = header.is_ok_and(|h| h.lost_events);
        if lost || b.state.compact.interned() > INTERNER_THRESHOLD {
            b.close();
            b.lost_pending = lost;
        }
        if lost {
            b.state.last_switched_to = None;
        }
        match parse_page(page, layout, &mut b) {
            Ok(s) => {
                if let Some(e) = s.error {
                    b.error(s.header.timestamp, e);
                }
            }
            Err(e) => {
                let ts = header.map(|h| h.timestamp).unwrap_or(0);
                b.error(ts, e);
            }
        }
    }
    if b.lost_pending {
        b.ensure_open();
    }
    b.close();
    b.summary
}

//! One `linux.ftrace` data source instance inside the mux: its writer, its
//! event filter and per-cpu parse state, and its `ftrace_stats`.

use std::rc::Rc;

use crate::pb::protos::mod_FtraceConfig::PrintFilter as PrintFilterConfig;
use crate::protozero::{put_varint, VecStream};
use crate::schema::trace_extensions;
use crate::traced_probes::clock::boot_time_ns;
use crate::traced_probes::ftrace::parse::bundle::{CpuState, EventFilter};
use crate::traced_probes::ftrace::parse::ksyms::LazySymbols;
use crate::traced_probes::ftrace::parse::print_filter::{PrintFilter, PrintMatch, PrintRule};
use crate::traced_probes::ftrace::parse::stats::{self, Phase, StatsSnapshot};
use crate::traced_probes::ftrace::parse::syscalls::SyscallWant;
use crate::traced_probes::ftrace::parse::translate::SharedKernelAddrs;
use crate::traced_probes::ftrace::{CpuStats, Tracefs};
use crate::tracing::core::trace_writer::TraceWriter;

/// Per-cpu buffer size in pages: as tracefs reports it now, and as we set it.
#[derive(Debug, Default, Clone, Copy)]
pub struct BufferSizes {
    pub now: Option<u32>,
    pub cached: Option<u32>,
}

pub struct Source {
    /// Its tracefs instance (`""`: the root).
    pub key: String,
    pub writer: TraceWriter,
    pub filter: EventFilter,
    pub compact: bool,
    pub events: Vec<(String, String)>,
    pub cpus: Vec<CpuState>,
    /// Kernel addresses interned on this source's sequence (all cpus).
    pub kernel: SharedKernelAddrs,
    pub started: bool,
    pub drain_ms: u32,
    /// The config set `drain_period_ms`: data leaves the kernel at that
    /// period even on a quiet machine (no 2 s quiet waits).
    pub drain_explicit: bool,
    pub session: u64,
    pub stats_before: Vec<CpuStats>,
    pub unknown_events: Vec<String>,
    pub failed_events: Vec<String>,
    pub preserve: bool,
    pub pids: Vec<i32>,
    /// Kernel-lost events already reported in the log.
    pub lost_reported: u64,
    /// `symbolize_ksyms`: the table, loading from setup on.
    pub ksyms: Option<Rc<LazySymbols>>,
    /// Its trace is stopping: the next flush is the last.
    pub stopping: bool,
    /// What it wants of raw_syscalls (`None`: not enabled).
    pub syscalls: Option<SyscallWant>,
    /// What setup could not give as asked (e.g. a clamped buffer size).
    pub setup_note: Option<String>,
    /// The events of its kprobes (as `kprobe_profile` names them).
    pub kprobe_names: Vec<String>,
    /// (hits, misses) of those at the flush being written.
    pub kprobe_stats: Option<(u64, u64)>,
}

impl Source {
    /// The parse state of `cpu`, made on first use.
    pub fn cpu(&mut self, cpu: usize) -> &mut CpuState {
        while self.cpus.len() <= cpu {
            self.cpus.push(CpuState::on_sequence(&self.kernel));
        }
        &mut self.cpus[cpu]
    }

    /// Says in the log (stderr: the terminal of an autostarted run) when
    /// the kernel lost events since the source started, once per increase.
    /// The counts per cpu are in the trace's ftrace_stats.
    pub fn report_kernel_loss(&mut self, before: &[CpuStats], after: &[CpuStats]) {
        let lost = stats::kernel_events_lost(before, after);
        if lost > self.lost_reported {
            crate::log_warn!(
                "ftrace: the kernel lost {lost} events (per-cpu buffers overran before they \
                 were read); a larger buffer_size_kb keeps them"
            );
            self.lost_reported = lost;
        }
    }

    /// One `ftrace_stats` packet; errors and unknown events only at the end.
    pub fn write_stats(
        &mut self,
        phase: Phase,
        cpu_stats: &[CpuStats],
        sizes: BufferSizes,
        atrace_errors: Option<&str>,
    ) {
        let end = phase == Phase::EndOfTrace;
        let parse_errors: Vec<_> = self
            .cpus
            .iter()
            .flat_map(|c| c.parse_errors.iter().copied())
            .collect();
        let none: &[String] = &[];
        let unrecorded: Vec<u64> = self.cpus.iter().map(|c| c.unrecorded_switches).collect();
        let snapshot = StatsSnapshot {
            cpu_stats,
            unrecorded_switches: &unrecorded,
            unknown_ftrace_events: if end { &self.unknown_events } else { none },
            failed_ftrace_events: if end { &self.failed_events } else { none },
            atrace_errors,
            setup_error: if end {
                self.setup_note.as_deref()
            } else {
                None
            },
            preserve_ftrace_buffer: self.preserve,
            parse_errors: if end { &parse_errors } else { &[] },
            cpu_buffer_size_pages: sizes.now,
            cached_cpu_buffer_size_pages: sizes.cached,
            kprobe_stats: if end { self.kprobe_stats } else { None },
            kernel_symbols: self.ksyms.as_ref().map(|k| {
                let k = k.get();
                (k.len() as u32, k.mem_bytes().div_ceil(1024) as u32)
            }),
        };
        if unrecorded.iter().any(|&n| n > 0) {
            // The stats carry a tracebox extension: declare it on this
            // sequence too, so that a trace recorded by upstream's traced
            // (which does not declare ours) decodes with no unknown field.
            let mut s = VecStream::new();
            put_varint(&mut s, 8, boot_time_ns());
            crate::protozero::put_bytes(
                &mut s,
                trace_extensions::EXTENSION_DESCRIPTOR,
                &trace_extensions::extension_descriptor(),
            );
            self.writer.write_packet(s.as_bytes());
        }
        let mut s = VecStream::new();
        put_varint(&mut s, 8, boot_time_ns());
        stats::write_ftrace_stats(&mut s, phase, &snapshot);
        // Beside FtraceStats, in the packet: a field of ours inside it
        // would be unknown to upstream's readers.
        trace_extensions::write_unrecorded_switches(&mut s, &unrecorded);
        self.writer.write_packet(s.as_bytes());
    }
}

/// The config's print filter. A rule with neither match is an empty
/// prefix (matches everything), as upstream reads it.
pub fn print_filter(pf: &PrintFilterConfig) -> PrintFilter {
    use crate::pb::protos::mod_FtraceConfig::mod_PrintFilter::mod_Rule::OneOfmatch_pb as M;
    let rules = pf
        .rules
        .iter()
        .map(|r| PrintRule {
            allow: r.allow.unwrap_or(false),
            matcher: match &r.match_pb {
                M::atrace_msg(a) => PrintMatch::Atrace {
                    kind: a.type_pb.clone().unwrap_or_default().into_bytes(),
                    prefix: a.prefix.clone().unwrap_or_default().into_bytes(),
                },
                M::prefix(p) => PrintMatch::Prefix(p.clone().into_bytes()),
                M::None => PrintMatch::Prefix(Vec::new()),
            },
        })
        .collect();
    PrintFilter { rules }
}

pub fn cpu_stats(t: &Tracefs) -> Vec<CpuStats> {
    (0..t.num_cpus().unwrap_or(0))
        .map(|c| t.cpu_stats(c).unwrap_or_default())
        .collect()
}

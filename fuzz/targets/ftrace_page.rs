//! One ring-buffer page: the raw parser with 64- and 32-bit header layouts,
//! then the full bundle encoder (typed, generic and compact sched paths).

use tracebox::protozero::VecStream;
use tracebox::traced_probes::ftrace::parse::bundle::{
    write_pages, BundleContext, CpuState, EventFilter, PacketWriter,
};
use tracebox::traced_probes::ftrace::parse::format::{parse_format, PageHeaderLayout};
use tracebox::traced_probes::ftrace::parse::page_parser::{parse_page, PageSink, ParseError};
use tracebox::traced_probes::ftrace::parse::{compact_sched, translate::TranslationTable};

/// The format files, found from the crate that builds this file (the fuzz
/// crate for cargo-fuzz, the repository for the replay test), so a fuzzer
/// started from any directory reads them.
fn td() -> &'static str {
    const DIRS: [&str; 2] = [
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/ftrace-pages/"),
        concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/ftrace-pages/"),
    ];
    DIRS.into_iter()
        .find(|d| std::path::Path::new(d).is_dir())
        .unwrap_or(DIRS[1])
}

struct Count(u64);
impl PageSink for Count {
    fn on_event(&mut self, ts: u64, id: u16, rec: &[u8]) -> Result<(), ParseError> {
        self.0 = self.0.wrapping_add(ts ^ id as u64 ^ rec.len() as u64);
        Ok(())
    }
}

struct Sink(VecStream);
impl PacketWriter for Sink {
    type Stream = VecStream;
    fn new_packet(&mut self) {
        self.0.clear()
    }
    fn stream(&mut self) -> &mut VecStream {
        &mut self.0
    }
    fn finish_packet(&mut self) {}
}

/// One fuzz input (cargo-fuzz and the stable replay runner call this).
pub fn run(page: &[u8]) {
    for layout in [PageHeaderLayout::DEFAULT_64, PageHeaderLayout::DEFAULT_32] {
        let _ = parse_page(page, &layout, &mut Count(0));
    }
    let read = |n: &str| std::fs::read_to_string(format!("{}{n}.format", td())).ok();
    let table = TranslationTable::build(&|_, n| read(n));
    let mut filter = EventFilter::default();
    (0..2048).for_each(|id| filter.enable(id));
    let (sw, wk) = (read("sched_switch").unwrap(), read("sched_waking").unwrap());
    let compact = compact_sched::validate(&parse_format(&sw).unwrap(), &parse_format(&wk).unwrap());
    for compact_sched in [None, compact] {
        let ctx = BundleContext {
            table: &table,
            filter: &filter,
            compact_sched,
            sched_switch: compact.map(|c| c.switch),
            clock: None,
            ksyms: None,
        };
        let layout = PageHeaderLayout::DEFAULT_64;
        write_pages(
            &mut Sink(VecStream::new()),
            0,
            page,
            &layout,
            &ctx,
            &mut CpuState::default(),
        );
    }
}

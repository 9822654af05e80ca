#![no_main]
//! One ring-buffer page, with the 64-bit and 32-bit header layouts.

use libfuzzer_sys::fuzz_target;
use tracebox::probes::ftrace::format::PageHeaderLayout;
use tracebox::probes::ftrace::page_parser::{parse_page, PageSink, ParseError};

struct Count(u64);
impl PageSink for Count {
    fn on_event(&mut self, ts: u64, id: u16, rec: &[u8]) -> Result<(), ParseError> {
        self.0 = self.0.wrapping_add(ts ^ id as u64 ^ rec.len() as u64);
        Ok(())
    }
}

fuzz_target!(|page: &[u8]| {
    for layout in [PageHeaderLayout::DEFAULT_64, PageHeaderLayout::DEFAULT_32] {
        let _ = parse_page(page, &layout, &mut Count(0));
    }
});

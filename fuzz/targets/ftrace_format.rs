//! tracefs text formats: event format files, header_page/header_event,
//! printk_formats, per-cpu stats (and the decimal parser under them).

use tracebox::protozero::decimal::parse_decimal;
use tracebox::traced_probes::ftrace::parse::format::{
    parse_format, parse_header_event, parse_header_page,
};
use tracebox::traced_probes::ftrace::parse::translate::parse_printk_formats;
use tracebox::traced_probes::ftrace::tracefs::CpuStats;

/// One fuzz input (cargo-fuzz and the stable replay runner call this).
pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = parse_format(&text);
    let _ = parse_header_page(&text);
    let _ = parse_header_event(&text);
    let _ = parse_printk_formats(&text);
    let _ = CpuStats::parse(&text);
    let _ = parse_decimal(&text);
}

//! `linux.system_info`: one `cpu_info` packet at start, and with
//! `irq_names` one `interrupt_info` packet naming the numeric irqs.

use std::time::Duration;

use crate::pb::protos::DataSourceConfig;
use crate::traced_probes::clock::boot_time_ns;
use crate::traced_probes::data_source::{DataSource, Env};
use crate::traced_probes::fs_root::{FsRoot, ReadErrors};
use crate::traced_probes::system_info::{
    parse_interrupts, read_cpu_info, write_cpu_info_packet, write_interrupt_info_packet,
};
use crate::tracing::core::trace_writer::TraceWriter;

pub struct SystemInfoSource {
    writer: TraceWriter,
    irq_names: bool,
}

impl SystemInfoSource {
    pub fn new(config: &DataSourceConfig, writer: TraceWriter) -> Self {
        let irq_names = config
            .system_info_config
            .as_ref()
            .and_then(|c| c.irq_names)
            .unwrap_or(false);
        SystemInfoSource { writer, irq_names }
    }
}

impl DataSource for SystemInfoSource {
    fn start(&mut self, _env: &mut Env<'_>) -> Option<Duration> {
        let mut errors = ReadErrors::default();
        let root = FsRoot::host();
        let p = read_cpu_info(&root, boot_time_ns(), &mut errors);
        write_cpu_info_packet(&mut self.writer.new_packet(), &p);
        if self.irq_names {
            let text = root
                .read_trimmed("proc/interrupts", &mut errors)
                .unwrap_or_default();
            let irqs = parse_interrupts(&text);
            write_interrupt_info_packet(&mut self.writer.new_packet(), boot_time_ns(), &irqs);
        }
        None
    }

    fn flush(&mut self, _env: &mut Env<'_>) {
        self.writer.flush();
    }
}

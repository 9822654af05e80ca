//! `linux.system_info`: one `cpu_info` packet at start.

use std::time::Duration;

use crate::traced_probes::clock::boot_time_ns;
use crate::traced_probes::data_source::{DataSource, Env};
use crate::traced_probes::fs_root::{FsRoot, ReadErrors};
use crate::traced_probes::system_info::{read_cpu_info, write_cpu_info_packet};
use crate::tracing::core::trace_writer::TraceWriter;

pub struct SystemInfoSource {
    writer: TraceWriter,
}

impl SystemInfoSource {
    pub fn new(writer: TraceWriter) -> Self {
        SystemInfoSource { writer }
    }
}

impl DataSource for SystemInfoSource {
    fn start(&mut self, _env: &mut Env<'_>) -> Option<Duration> {
        let mut errors = ReadErrors::default();
        let p = read_cpu_info(&FsRoot::host(), boot_time_ns(), &mut errors);
        write_cpu_info_packet(&mut self.writer.new_packet(), &p);
        None
    }

    fn flush(&mut self, _env: &mut Env<'_>) {
        self.writer.flush();
    }
}

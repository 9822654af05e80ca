//! `linux.sysfs_power`: battery counters every second (nothing on
//! machines without a battery).

use std::time::Duration;

use crate::traced_probes::clock::boot_time_ns;
use crate::traced_probes::data_source::{DataSource, Env};
use crate::traced_probes::fs_root::{FsRoot, ReadErrors};
use crate::traced_probes::power::{write_battery_packet, PowerSupplies, POLL_INTERVAL_MS};
use crate::tracing::core::trace_writer::TraceWriter;

pub struct PowerSource {
    supplies: Option<PowerSupplies>,
    errors: ReadErrors,
    writer: TraceWriter,
}

impl PowerSource {
    pub fn new(writer: TraceWriter) -> Self {
        PowerSource {
            supplies: None,
            errors: ReadErrors::default(),
            writer,
        }
    }

    fn poll(&mut self) -> Option<Duration> {
        let supplies = self.supplies.as_ref()?;
        if supplies.battery_names().is_empty() {
            return None;
        }
        for p in supplies.read(boot_time_ns(), &mut self.errors) {
            write_battery_packet(&mut self.writer.new_packet(), &p);
        }
        Some(Duration::from_millis(POLL_INTERVAL_MS as u64))
    }
}

impl DataSource for PowerSource {
    fn start(&mut self, _env: &mut Env<'_>) -> Option<Duration> {
        self.supplies = Some(PowerSupplies::discover(&FsRoot::host(), &mut self.errors));
        self.poll()
    }

    fn tick(&mut self, _env: &mut Env<'_>) -> Option<Duration> {
        self.poll()
    }

    fn flush(&mut self, _env: &mut Env<'_>) {
        self.writer.flush();
    }
}

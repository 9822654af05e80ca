//! `linux.sysfs_power`: battery counters from /sys/class/power_supply
//! (protos/perfetto/trace/power/battery_counters.proto), polled every
//! [`POLL_INTERVAL_MS`].

pub mod data_source;

use crate::protozero::{begin_nested, end_nested, put_fixed32, put_str, put_varint, Stream};
use crate::traced_probes::fs_root::{FsRoot, ReadErrors};

/// Upstream polls once a second; the config has no knob.
pub const POLL_INTERVAL_MS: u32 = 1000;

const SUPPLY_DIR: &str = "sys/class/power_supply";

/// One battery's counters; `None` where the driver has no such file.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct BatteryPacket {
    pub timestamp: u64,
    pub charge_counter_uah: Option<i64>,
    pub capacity_percent: Option<f32>,
    pub current_ua: Option<i64>,
    pub current_avg_ua: Option<i64>,
    pub energy_counter_uwh: Option<i64>,
    pub voltage_uv: Option<i64>,
    /// Only set when there is more than one battery.
    pub name: Option<String>,
}

/// The batteries found at start (`type` = Battery and `present` = 1).
#[derive(Debug, Clone)]
pub struct PowerSupplies {
    root: FsRoot,
    batteries: Vec<String>,
}

impl PowerSupplies {
    /// Scans the power_supply class once, as upstream does at start.
    pub fn discover(root: &FsRoot, errors: &mut ReadErrors) -> Self {
        let mut quiet = ReadErrors::default();
        let batteries = root
            .list_dir(SUPPLY_DIR, errors)
            .into_iter()
            .filter(|d| !d.starts_with('.'))
            .filter(|d| {
                root.read_trimmed(&format!("{SUPPLY_DIR}/{d}/type"), &mut quiet)
                    .as_deref()
                    == Some("Battery")
                    && root
                        .read_trimmed(&format!("{SUPPLY_DIR}/{d}/present"), &mut quiet)
                        .as_deref()
                        == Some("1")
            })
            .collect();
        errors.malformed += quiet.malformed;
        Self {
            root: root.clone(),
            batteries,
        }
    }

    pub fn battery_names(&self) -> &[String] {
        &self.batteries
    }

    /// One packet per battery. Files a driver lacks are not errors; values
    /// that do not parse are counted.
    pub fn read(&self, timestamp: u64, errors: &mut ReadErrors) -> Vec<BatteryPacket> {
        let many = self.batteries.len() > 1;
        self.batteries
            .iter()
            .map(|b| {
                let mut quiet = ReadErrors::default();
                let mut get = |file: &str| {
                    self.root
                        .read_i64(&format!("{SUPPLY_DIR}/{b}/{file}"), &mut quiet)
                };
                let packet = BatteryPacket {
                    timestamp,
                    charge_counter_uah: get("charge_now"),
                    capacity_percent: get("capacity").map(|v| v as f32),
                    current_ua: get("current_now"),
                    current_avg_ua: get("current_avg"),
                    energy_counter_uwh: get("energy_now"),
                    voltage_uv: get("voltage_now"),
                    name: many.then(|| b.clone()),
                };
                errors.malformed += quiet.malformed;
                packet
            })
            .collect()
    }
}

const PACKET_TIMESTAMP: u32 = 8;
const PACKET_BATTERY: u32 = 38;

/// Writes `timestamp` and `battery` into an open TracePacket.
pub fn write_battery_packet<S: Stream + ?Sized>(s: &mut S, p: &BatteryPacket) {
    put_varint(s, PACKET_TIMESTAMP, p.timestamp);
    let n = begin_nested(s, PACKET_BATTERY);
    if let Some(v) = p.charge_counter_uah {
        put_varint(s, 1, v as u64);
    }
    if let Some(v) = p.capacity_percent {
        put_fixed32(s, 2, v.to_bits());
    }
    if let Some(v) = p.current_ua {
        put_varint(s, 3, v as u64);
    }
    if let Some(v) = p.current_avg_ua {
        put_varint(s, 4, v as u64);
    }
    if let Some(name) = &p.name {
        put_str(s, 5, name);
    }
    if let Some(v) = p.energy_counter_uwh {
        put_varint(s, 6, v as u64);
    }
    if let Some(v) = p.voltage_uv {
        put_varint(s, 7, v as u64);
    }
    end_nested(s, n);
}

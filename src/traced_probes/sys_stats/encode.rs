//! Writes a `sys_stats` packet as a TracePacket body. Field numbers:
//! protos/perfetto/trace/sys_stats/sys_stats.proto.

use super::model::SysStatsPacket;
use crate::protozero::{begin_nested, end_nested, put_str, put_varint, Stream};

const PACKET_TIMESTAMP: u32 = 8;
const PACKET_SYS_STATS: u32 = 7;

const MEMINFO: u32 = 1;
const VMSTAT: u32 = 2;
const CPU_STAT: u32 = 3;
const NUM_FORKS: u32 = 4;
const NUM_IRQ_TOTAL: u32 = 5;
const NUM_IRQ: u32 = 6;
const NUM_SOFTIRQ_TOTAL: u32 = 7;
const NUM_SOFTIRQ: u32 = 8;
const COLLECTION_END_TIMESTAMP: u32 = 9;
const DEVFREQ: u32 = 10;
const CPUFREQ_KHZ: u32 = 11;
const BUDDY_INFO: u32 = 12;
const DISK_STAT: u32 = 13;
const PSI: u32 = 14;
const THERMAL_ZONE: u32 = 15;
const CPUIDLE_STATE: u32 = 16;
const GPUFREQ_MHZ: u32 = 17;
const SLAB_INFO: u32 = 18;

/// Writes a `{key = 1, value = 2}` sub-message with a varint key.
fn key_value<S: Stream + ?Sized>(s: &mut S, field: u32, key: u64, value: u64) {
    let n = begin_nested(s, field);
    put_varint(s, 1, key);
    put_varint(s, 2, value);
    end_nested(s, n);
}

/// Writes `timestamp` and `sys_stats` into an open TracePacket.
pub fn write_sys_stats_packet<S: Stream + ?Sized>(s: &mut S, p: &SysStatsPacket) {
    put_varint(s, PACKET_TIMESTAMP, p.timestamp);
    let st = begin_nested(s, PACKET_SYS_STATS);
    for &(id, v) in &p.meminfo {
        key_value(s, MEMINFO, id as u64, v);
    }
    for &(id, v) in &p.vmstat {
        key_value(s, VMSTAT, id as u64, v);
    }
    for c in &p.cpu_stat {
        let n = begin_nested(s, CPU_STAT);
        put_varint(s, 1, c.cpu_id as u64);
        let times = [
            c.user_ns,
            c.user_nice_ns,
            c.system_mode_ns,
            c.idle_ns,
            c.io_wait_ns,
            c.irq_ns,
            c.softirq_ns,
            c.steal_ns,
        ];
        for (i, t) in times.into_iter().enumerate() {
            put_varint(s, 2 + i as u32, t);
        }
        end_nested(s, n);
    }
    if let Some(v) = p.num_forks {
        put_varint(s, NUM_FORKS, v);
    }
    if let Some(v) = p.num_irq_total {
        put_varint(s, NUM_IRQ_TOTAL, v);
    }
    for &(irq, count) in &p.num_irq {
        key_value(s, NUM_IRQ, irq as i64 as u64, count);
    }
    if let Some(v) = p.num_softirq_total {
        put_varint(s, NUM_SOFTIRQ_TOTAL, v);
    }
    for &(irq, count) in &p.num_softirq {
        key_value(s, NUM_SOFTIRQ, irq as i64 as u64, count);
    }
    for (dev, v) in &p.devfreq {
        let n = begin_nested(s, DEVFREQ);
        put_str(s, 1, dev);
        put_varint(s, 2, *v);
        end_nested(s, n);
    }
    // Not packed: upstream writes repeated uint32 unpacked.
    for &khz in &p.cpufreq_khz {
        put_varint(s, CPUFREQ_KHZ, khz as u64);
    }
    for b in &p.buddy_info {
        let n = begin_nested(s, BUDDY_INFO);
        put_str(s, 1, &b.node);
        put_str(s, 2, &b.zone);
        for &pages in &b.order_pages {
            put_varint(s, 3, pages as u64);
        }
        end_nested(s, n);
    }
    for d in &p.disk_stat {
        let n = begin_nested(s, DISK_STAT);
        put_str(s, 1, &d.device_name);
        let vals = [
            d.read_sectors,
            d.read_time_ms,
            d.write_sectors,
            d.write_time_ms,
            d.discard_sectors,
            d.discard_time_ms,
            d.flush_count,
            d.flush_time_ms,
        ];
        for (i, v) in vals.into_iter().enumerate() {
            put_varint(s, 2 + i as u32, v);
        }
        end_nested(s, n);
    }
    for psi in &p.psi {
        key_value(s, PSI, psi.resource as u64, psi.total_ns);
    }
    for z in &p.thermal_zone {
        let n = begin_nested(s, THERMAL_ZONE);
        put_str(s, 1, &z.name);
        if let Some(t) = z.temp {
            put_varint(s, 2, t);
        }
        if let Some(k) = &z.kind {
            put_str(s, 3, k);
        }
        end_nested(s, n);
    }
    for c in &p.cpuidle_state {
        let n = begin_nested(s, CPUIDLE_STATE);
        put_varint(s, 1, c.cpu_id as u64);
        for (name, us) in &c.states {
            let e = begin_nested(s, 2);
            put_str(s, 1, name);
            put_varint(s, 2, *us);
            end_nested(s, e);
        }
        end_nested(s, n);
    }
    for &mhz in &p.gpufreq_mhz {
        put_varint(s, GPUFREQ_MHZ, mhz);
    }
    for sl in &p.slab_info {
        let n = begin_nested(s, SLAB_INFO);
        put_str(s, 1, &sl.name);
        put_varint(s, 2, sl.pages_per_slab as u64);
        put_varint(s, 3, sl.num_slabs as u64);
        end_nested(s, n);
    }
    put_varint(s, COLLECTION_END_TIMESTAMP, p.collection_end_timestamp);
    end_nested(s, st);
}

//! Writes `process_tree` / `process_stats` packets as TracePacket bodies.
//!
//! Field numbers: protos/perfetto/trace/ps/process_tree.proto,
//! process_stats.proto and trace_packet.proto.

use super::model::{ProcessStatsPacket, ProcessTreePacket};
use crate::protozero::{begin_nested, end_nested, put_str, put_varint, Stream};

mod packet {
    pub const TIMESTAMP: u32 = 8;
    pub const PROCESS_TREE: u32 = 2;
    pub const PROCESS_STATS: u32 = 9;
    pub const INCREMENTAL_STATE_CLEARED: u32 = 41;
}

mod tree {
    pub const PROCESSES: u32 = 1;
    pub const THREADS: u32 = 2;
    pub const COLLECTION_END_TIMESTAMP: u32 = 3;
    // ProcessTree.Process
    pub const P_PID: u32 = 1;
    pub const P_PPID: u32 = 2;
    pub const P_CMDLINE: u32 = 3;
    pub const P_UID: u32 = 5;
    pub const P_NSPID: u32 = 6;
    pub const P_START_FROM_BOOT: u32 = 7;
    pub const P_IS_KTHREAD: u32 = 8;
    pub const P_CMDLINE_IS_COMM: u32 = 9;
    // ProcessTree.Thread
    pub const T_TID: u32 = 1;
    pub const T_NAME: u32 = 2;
    pub const T_TGID: u32 = 3;
    pub const T_NSTID: u32 = 4;
}

mod stats {
    pub const PROCESSES: u32 = 1;
    pub const COLLECTION_END_TIMESTAMP: u32 = 2;
    pub const PID: u32 = 1;
    pub const VM_SIZE_KB: u32 = 2;
    pub const VM_RSS_KB: u32 = 3;
    pub const RSS_ANON_KB: u32 = 4;
    pub const RSS_FILE_KB: u32 = 5;
    pub const RSS_SHMEM_KB: u32 = 6;
    pub const VM_SWAP_KB: u32 = 7;
    pub const VM_LOCKED_KB: u32 = 8;
    pub const VM_HWM_KB: u32 = 9;
    pub const OOM_SCORE_ADJ: u32 = 10;
    pub const FDS: u32 = 15;
    pub const SMR_RSS_KB: u32 = 16;
    pub const SMR_PSS_KB: u32 = 17;
    pub const SMR_PSS_ANON_KB: u32 = 18;
    pub const SMR_PSS_FILE_KB: u32 = 19;
    pub const SMR_PSS_SHMEM_KB: u32 = 20;
    pub const RUNTIME_USER_MODE: u32 = 21;
    pub const RUNTIME_KERNEL_MODE: u32 = 22;
    pub const SMR_SWAP_PSS_KB: u32 = 23;
    pub const DMABUF_RSS_KB: u32 = 24;
    // FDInfo
    pub const FD_FD: u32 = 1;
    pub const FD_PATH: u32 = 2;
}

fn put_bool_field<S: Stream + ?Sized>(s: &mut S, field: u32, v: bool) {
    put_varint(s, field, v as u64);
}

/// int32 fields are sign-extended to 64 bits on the wire.
fn put_i32<S: Stream + ?Sized>(s: &mut S, field: u32, v: i32) {
    put_varint(s, field, v as i64 as u64);
}

fn put_header<S: Stream + ?Sized>(s: &mut S, timestamp: u64, cleared: bool) {
    put_varint(s, packet::TIMESTAMP, timestamp);
    if cleared {
        put_bool_field(s, packet::INCREMENTAL_STATE_CLEARED, true);
    }
}

/// Writes `timestamp` and `process_tree` into an open TracePacket.
pub fn write_process_tree_packet<S: Stream + ?Sized>(s: &mut S, p: &ProcessTreePacket) {
    put_header(s, p.timestamp, p.incremental_state_cleared);
    let t = begin_nested(s, packet::PROCESS_TREE);
    for proc_ in &p.processes {
        let n = begin_nested(s, tree::PROCESSES);
        put_i32(s, tree::P_PID, proc_.pid);
        put_i32(s, tree::P_PPID, proc_.ppid);
        for arg in proc_.cmdline.args() {
            put_str(s, tree::P_CMDLINE, arg);
        }
        if proc_.cmdline_is_comm {
            put_bool_field(s, tree::P_CMDLINE_IS_COMM, true);
        }
        put_i32(s, tree::P_UID, proc_.uid);
        for &ns in &proc_.nspid {
            put_i32(s, tree::P_NSPID, ns);
        }
        if let Some(start) = proc_.start_from_boot_ns {
            put_varint(s, tree::P_START_FROM_BOOT, start);
        }
        if let Some(k) = proc_.is_kthread {
            put_bool_field(s, tree::P_IS_KTHREAD, k);
        }
        end_nested(s, n);
    }
    for th in &p.threads {
        let n = begin_nested(s, tree::THREADS);
        put_i32(s, tree::T_TID, th.tid);
        put_i32(s, tree::T_TGID, th.tgid);
        for &ns in &th.nstid {
            put_i32(s, tree::T_NSTID, ns);
        }
        if let Some(name) = &th.name {
            put_str(s, tree::T_NAME, name);
        }
        end_nested(s, n);
    }
    put_varint(
        s,
        tree::COLLECTION_END_TIMESTAMP,
        p.collection_end_timestamp,
    );
    end_nested(s, t);
}

/// Writes `timestamp` and `process_stats` into an open TracePacket.
pub fn write_process_stats_packet<S: Stream + ?Sized>(s: &mut S, p: &ProcessStatsPacket) {
    put_header(s, p.timestamp, p.incremental_state_cleared);
    let st = begin_nested(s, packet::PROCESS_STATS);
    for sample in &p.processes {
        let n = begin_nested(s, stats::PROCESSES);
        put_i32(s, stats::PID, sample.pid);
        let u64_fields = [
            (stats::VM_SIZE_KB, sample.vm_size_kb),
            (stats::VM_RSS_KB, sample.vm_rss_kb),
            (stats::RSS_ANON_KB, sample.rss_anon_kb),
            (stats::RSS_FILE_KB, sample.rss_file_kb),
            (stats::RSS_SHMEM_KB, sample.rss_shmem_kb),
            (stats::VM_SWAP_KB, sample.vm_swap_kb),
            (stats::VM_LOCKED_KB, sample.vm_locked_kb),
            (stats::VM_HWM_KB, sample.vm_hwm_kb),
            (stats::SMR_RSS_KB, sample.smr_rss_kb),
            (stats::SMR_PSS_KB, sample.smr_pss_kb),
            (stats::SMR_PSS_ANON_KB, sample.smr_pss_anon_kb),
            (stats::SMR_PSS_FILE_KB, sample.smr_pss_file_kb),
            (stats::SMR_PSS_SHMEM_KB, sample.smr_pss_shmem_kb),
            (stats::SMR_SWAP_PSS_KB, sample.smr_swap_pss_kb),
            (stats::RUNTIME_USER_MODE, sample.runtime_user_mode_ns),
            (stats::RUNTIME_KERNEL_MODE, sample.runtime_kernel_mode_ns),
            (stats::DMABUF_RSS_KB, sample.dmabuf_rss_kb),
        ];
        for (field, v) in u64_fields {
            if let Some(v) = v {
                put_varint(s, field, v);
            }
        }
        if let Some(adj) = sample.oom_score_adj {
            put_varint(s, stats::OOM_SCORE_ADJ, adj as u64);
        }
        for (fd, path) in &sample.fds {
            let f = begin_nested(s, stats::FDS);
            put_varint(s, stats::FD_FD, *fd);
            put_str(s, stats::FD_PATH, path);
            end_nested(s, f);
        }
        end_nested(s, n);
    }
    put_varint(
        s,
        stats::COLLECTION_END_TIMESTAMP,
        p.collection_end_timestamp,
    );
    end_nested(s, st);
}

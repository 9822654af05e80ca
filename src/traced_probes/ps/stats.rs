//! Periodic `process_stats`: memory counters, oom_score_adj, runtimes,
//! smaps_rollup, dmabuf rss and fds, emitting only values that changed
//! since they were last emitted (the cache is dropped every TTL).

use super::model::{ProcStatsSample, ProcessStatsPacket};
use super::parse::{parse_smaps_rollup, parse_stat_times, parse_status};
use super::poller::ProcessStatsPoller;
use crate::traced_probes::fs_root::{leading_i64, leading_u64};

/// Returns `new` if it differs from the cached value, updating the cache.
fn changed<T: Copy + PartialEq>(cached: &mut Option<T>, new: Option<T>) -> Option<T> {
    let v = new?;
    if *cached == Some(v) {
        return None;
    }
    *cached = Some(v);
    Some(v)
}

impl ProcessStatsPoller {
    /// Samples every process. Returns the packet (if any value changed) and
    /// the pids that were sampled, which the tree pass then describes.
    pub(super) fn collect_stats(&mut self) -> (Option<ProcessStatsPacket>, Vec<i32>) {
        let mut packet = ProcessStatsPacket {
            timestamp: self.now(),
            ..Default::default()
        };
        let mut sampled = Vec::new();
        let pids = self.procfs.list_pids();
        self.procfs.retain_kept(&pids);
        for pid in pids {
            let mut sample = ProcStatsSample {
                pid,
                ..Default::default()
            };
            if self.sample_process(&mut sample) {
                sampled.push(pid);
            }
            if !sample.is_empty() {
                packet.processes.push(sample);
            }
        }
        if packet.processes.is_empty() {
            return (None, sampled);
        }
        packet.collection_end_timestamp = self.now();
        packet.incremental_state_cleared = self.take_cleared_flag();
        (Some(packet), sampled)
    }

    /// Fills `sample` with changed values; true if the process was sampled.
    fn sample_process(&mut self, sample: &mut ProcStatsSample) -> bool {
        let pid = sample.pid;
        let mut sampled = false;
        if self.settings.record_process_runtime {
            let ns_per_tick = self.ns_per_tick;
            let times = self
                .procfs
                .read_kept(pid, "stat")
                .map(|b| parse_stat_times(b, ns_per_tick));
            match times {
                Some(Some(t)) => {
                    let c = self.cache.entry(pid).or_default();
                    sample.runtime_user_mode_ns = changed(&mut c.runtime_user_ns, Some(t.utime_ns));
                    sample.runtime_kernel_mode_ns =
                        changed(&mut c.runtime_kernel_ns, Some(t.stime_ns));
                    sampled = true;
                }
                Some(None) => self.procfs.errors.malformed += 1,
                None => {}
            }
        }
        if self.skip_mem.contains(&pid) {
            return sampled;
        }
        let Some(status) = self.procfs.read_kept(pid, "status").map(parse_status) else {
            return sampled;
        };
        if self.settings.record_process_dmabuf_rss {
            // Android-only file, in bytes; absent elsewhere (not an error).
            if let Some(bytes) = self.procfs.read(pid, "dmabuf_rss").and_then(leading_u64) {
                let c = self.cache.entry(pid).or_default();
                sample.dmabuf_rss_kb = changed(&mut c.dmabuf_rss_kb, Some(bytes / 1024));
            }
        }
        if !status.mem.has_counters() {
            // A kernel thread: no memory counters now or ever.
            self.skip_mem.insert(pid);
            self.procfs.forget_kept(pid, "status");
            return sampled;
        }
        let smaps = if self.settings.scan_smaps_rollup {
            self.procfs
                .read(pid, "smaps_rollup")
                .map(parse_smaps_rollup)
        } else {
            None
        };
        let oom = self
            .procfs
            .read_kept(pid, "oom_score_adj")
            .and_then(leading_i64);

        let c = self.cache.entry(pid).or_default();
        let m = &status.mem;
        sample.vm_size_kb = changed(&mut c.mem.vm_size_kb, m.vm_size_kb);
        sample.vm_locked_kb = changed(&mut c.mem.vm_locked_kb, m.vm_locked_kb);
        sample.vm_hwm_kb = changed(&mut c.mem.vm_hwm_kb, m.vm_hwm_kb);
        sample.vm_rss_kb = changed(&mut c.mem.vm_rss_kb, m.vm_rss_kb);
        sample.rss_anon_kb = changed(&mut c.mem.rss_anon_kb, m.rss_anon_kb);
        sample.rss_file_kb = changed(&mut c.mem.rss_file_kb, m.rss_file_kb);
        sample.rss_shmem_kb = changed(&mut c.mem.rss_shmem_kb, m.rss_shmem_kb);
        sample.vm_swap_kb = changed(&mut c.mem.vm_swap_kb, m.vm_swap_kb);
        if let Some(r) = smaps {
            sample.smr_rss_kb = changed(&mut c.smaps.rss_kb, r.rss_kb);
            sample.smr_pss_kb = changed(&mut c.smaps.pss_kb, r.pss_kb);
            sample.smr_pss_anon_kb = changed(&mut c.smaps.pss_anon_kb, r.pss_anon_kb);
            sample.smr_pss_file_kb = changed(&mut c.smaps.pss_file_kb, r.pss_file_kb);
            sample.smr_pss_shmem_kb = changed(&mut c.smaps.pss_shmem_kb, r.pss_shmem_kb);
            sample.smr_swap_pss_kb = changed(&mut c.smaps.swap_pss_kb, r.swap_pss_kb);
        }
        sample.oom_score_adj = changed(&mut c.oom_score_adj, oom);
        if self.settings.resolve_process_fds {
            sample.fds = self.new_fds(pid);
        }
        true
    }

    /// Open fds of `pid` not reported before.
    fn new_fds(&mut self, pid: i32) -> Vec<(u64, String)> {
        let fds = self.procfs.list_fds(pid);
        let c = self.cache.entry(pid).or_default();
        fds.into_iter()
            .filter(|(fd, _)| c.seen_fds.insert(*fd))
            .collect()
    }

    /// fds of every pid, as one stats packet (start-up scan).
    pub(super) fn collect_all_fds(&mut self, pids: &[i32]) -> Option<ProcessStatsPacket> {
        let mut packet = ProcessStatsPacket {
            timestamp: self.now(),
            ..Default::default()
        };
        for &pid in pids {
            let fds = self.new_fds(pid);
            if !fds.is_empty() {
                packet.processes.push(ProcStatsSample {
                    pid,
                    fds,
                    ..Default::default()
                });
            }
        }
        if packet.processes.is_empty() {
            return None;
        }
        packet.collection_end_timestamp = self.now();
        packet.incremental_state_cleared = self.take_cleared_flag();
        Some(packet)
    }
}

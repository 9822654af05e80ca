//! Building `process_tree` packets: full /proc scans and on-demand scans of
//! single pids.
//!
//! In /proc, a thread id is also a valid `/proc/<tid>` path even though only
//! thread-group leaders are listed, so on-demand scans of a tid work.

use super::model::{Argv, ProcessTreePacket, TreeProcess, TreeThread};
use super::parse::{parse_stat_times, parse_status_ids, Status};
use super::poller::ProcessStatsPoller;

impl ProcessStatsPoller {
    fn new_tree(&mut self) -> ProcessTreePacket {
        ProcessTreePacket {
            timestamp: self.now(),
            ..Default::default()
        }
    }

    fn finish_tree(&mut self, mut tree: ProcessTreePacket) -> Option<ProcessTreePacket> {
        if tree.processes.is_empty() && tree.threads.is_empty() {
            return None;
        }
        tree.collection_end_timestamp = self.now();
        tree.incremental_state_cleared = self.take_cleared_flag();
        Some(tree)
    }

    /// Full scan of every process and thread (`scan_all_processes_on_start`).
    /// Also returns the open fds of every process when
    /// `resolve_process_fds` is set.
    pub fn scan_all(
        &mut self,
    ) -> (
        Option<ProcessTreePacket>,
        Option<super::model::ProcessStatsPacket>,
    ) {
        let mut tree = self.new_tree();
        let pids = self.procfs.list_pids();
        tree.processes.reserve(pids.len());
        tree.threads.reserve(pids.len());
        self.seen.reserve(pids.len());
        let pidfd = self.uses_pidfd_scan();
        for &pid in &pids {
            if pidfd && self.write_process_from_pidfd(&mut tree, pid) {
                continue;
            }
            let Some(status) = self.read_status(pid) else {
                continue;
            };
            if status.tgid != Some(pid) {
                // Not a thread-group leader (pid reused by a thread, or a
                // fixture listing threads): described via its leader.
                continue;
            }
            let single_threaded = status.threads == Some(1);
            let namespaced = self.write_process(&mut tree, pid, status);
            if single_threaded {
                // Only the main thread: skip listing task/ (most processes;
                // a thread born right now is caught by on-demand scans).
                continue;
            }
            self.write_threads(&mut tree, pid, namespaced);
        }
        let tree = self.finish_tree(tree);
        let fds = if self.settings.resolve_process_fds {
            self.collect_all_fds(&pids)
        } else {
            None
        };
        (tree, fds)
    }

    /// Adds the threads of process `pid` other than its main thread.
    pub(super) fn write_threads(
        &mut self,
        tree: &mut ProcessTreePacket,
        pid: i32,
        namespaced: bool,
    ) {
        for tid in self.procfs.list_tids(pid) {
            if tid == pid {
                continue;
            }
            if namespaced {
                // Namespaced thread ids are only in the thread's status.
                if let Some(st) = self.read_status(tid) {
                    self.write_detailed_thread(tree, tid, pid, &st);
                }
            } else if self.settings.record_thread_names {
                // comm is far cheaper for the kernel to produce than
                // status and holds the same name.
                let name = self.procfs.read_task_comm(pid, tid);
                if name.is_some() {
                    tree.threads.push(TreeThread {
                        tid,
                        tgid: pid,
                        name,
                        ..Default::default()
                    });
                    self.seen.insert(tid, pid);
                }
            } else {
                tree.threads.push(TreeThread {
                    tid,
                    tgid: pid,
                    ..Default::default()
                });
                self.seen.insert(tid, pid);
            }
        }
    }

    /// Describes each pid (process or thread) not described yet.
    pub(super) fn describe_pids(&mut self, pids: &[i32]) -> Option<ProcessTreePacket> {
        let mut tree = self.new_tree();
        for &pid in pids {
            if pid <= 0 || self.seen.contains_key(&pid) {
                continue;
            }
            self.write_process_or_thread(&mut tree, pid);
        }
        self.finish_tree(tree)
    }

    fn read_status(&mut self, pid: i32) -> Option<Status> {
        let buf = self.procfs.read(pid, "status")?;
        let st = parse_status_ids(buf);
        if st.pid.is_none() || st.tgid.is_none() {
            self.procfs.errors.malformed += 1;
            return None;
        }
        Some(st)
    }

    fn write_process_or_thread(&mut self, tree: &mut ProcessTreePacket, pid: i32) {
        let Some(status) = self.read_status(pid) else {
            self.write_own_exited_thread(tree, pid);
            return;
        };
        let (Some(tgid), Some(tid)) = (status.tgid, status.pid) else {
            return;
        };
        if tgid <= 0 || tid <= 0 {
            self.procfs.errors.malformed += 1;
            return;
        }
        if !self.seen.contains_key(&tgid) {
            if tgid == tid && pid == tgid {
                self.write_process(tree, tgid, status);
                return;
            } else if tgid == tid {
                self.write_process(tree, tgid, status.clone());
            } else if let Some(leader) = self.read_status(tgid) {
                self.write_process(tree, tgid, leader);
            }
        }
        if pid != tgid {
            self.write_detailed_thread(tree, pid, tgid, &status);
        }
    }

    /// Adds `pid` as a process. Returns whether it lives in a nested pid
    /// namespace (its threads then need their namespaced ids too).
    fn write_process(&mut self, tree: &mut ProcessTreePacket, pid: i32, status: Status) -> bool {
        // The pid may have been reused by a non-leader thread meanwhile.
        if status.tgid != Some(pid) || status.pid != Some(pid) {
            return false;
        }
        let mut p = TreeProcess {
            pid,
            ppid: status.ppid.unwrap_or(0),
            uid: status.uid.unwrap_or(0),
            nspid: status.ns_ids.clone(),
            is_kthread: status.kthread,
            ..Default::default()
        };
        // Kernel threads have no mm, hence never an argv: skip the read.
        if status.kthread != Some(true) {
            if let Some(buf) = self.procfs.read(pid, "cmdline") {
                p.cmdline = Argv::from_cmdline(buf);
            }
        }
        if p.cmdline.is_empty() {
            // Zombies and kernel threads have no argv: use comm.
            p.cmdline = Argv::from_args([status.name.as_deref().unwrap_or_default()]);
            p.cmdline_is_comm = true;
        }
        if self.settings.record_process_age {
            p.start_from_boot_ns = self.read_start_time(pid);
        }
        let namespaced = !p.nspid.is_empty();
        tree.processes.push(p);
        if !self.settings.skip_main_thread_message {
            self.write_owned_thread(tree, pid, pid, status);
        } else {
            self.seen.insert(pid, pid);
        }
        namespaced
    }

    /// Start time of `pid` since boot (`record_process_age`).
    pub(super) fn read_start_time(&mut self, pid: i32) -> Option<u64> {
        let ns_per_tick = self.ns_per_tick;
        let buf = self.procfs.read(pid, "stat")?;
        let times = parse_stat_times(buf, ns_per_tick);
        if times.is_none() {
            self.procfs.errors.malformed += 1;
        }
        times.map(|t| t.start_from_boot_ns)
    }

    /// One of traced_probes' own helper threads (`ksyms-load`) that ftrace
    /// saw run and that has exited since: a thread of this process.
    fn write_own_exited_thread(&mut self, tree: &mut ProcessTreePacket, tid: i32) {
        use crate::base::own_threads;
        let Some(name) = own_threads::name_of(tid) else {
            return;
        };
        let tgid = own_threads::own_pid();
        if !self.seen.contains_key(&tgid) {
            if let Some(leader) = self.read_status(tgid) {
                self.write_process(tree, tgid, leader);
            }
        }
        tree.threads.push(TreeThread {
            tid,
            tgid,
            nstid: Vec::new(),
            name: self.settings.record_thread_names.then_some(name),
        });
        self.seen.insert(tid, tgid);
    }

    fn write_detailed_thread(
        &mut self,
        tree: &mut ProcessTreePacket,
        tid: i32,
        tgid: i32,
        status: &Status,
    ) {
        self.write_owned_thread(tree, tid, tgid, status.clone());
    }

    /// [`Self::write_detailed_thread`] of a status not needed afterwards:
    /// its name and namespaced ids move into the packet.
    fn write_owned_thread(
        &mut self,
        tree: &mut ProcessTreePacket,
        tid: i32,
        tgid: i32,
        status: Status,
    ) {
        tree.threads.push(TreeThread {
            tid,
            tgid,
            nstid: status.ns_ids,
            name: if self.settings.record_thread_names {
                status.name
            } else {
                None
            },
        });
        self.seen.insert(tid, tgid);
    }
}

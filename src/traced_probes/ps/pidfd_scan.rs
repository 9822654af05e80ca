//! Full-scan fast path: a process's identity from a pidfd instead of
//! `/proc/<pid>/status`.
//!
//! Per process: `PIDFD_GET_INFO` (pid, tgid, ppid, real uid), the `ns/pid`
//! link (is it in our pid namespace?), `cmdline`, and the link count of
//! `task/` (thread count). Anything this path cannot describe exactly goes
//! back to the `status` path: kernel threads (their flag and name are in
//! status), processes in other pid namespaces (their namespaced ids are
//! only in status), non-leaders, unreadable links.

use super::model::{Argv, ProcessTreePacket, TreeProcess, TreeThread};
use super::poller::ProcessStatsPoller;
use crate::base::pidfd::{pid_info, PidInfoError};

/// kthreadd: the parent of every kernel thread.
const KTHREADD_PID: i32 = 2;

impl ProcessStatsPoller {
    /// Describes process `pid` (and its threads) without reading its
    /// status. Returns false when the caller must use the status path.
    pub(super) fn write_process_from_pidfd(
        &mut self,
        tree: &mut ProcessTreePacket,
        pid: i32,
    ) -> bool {
        let info = match pid_info(pid) {
            Ok(info) => info,
            Err(PidInfoError::Gone) => {
                self.procfs.vanished += 1;
                return true;
            }
            Err(_) => return false,
        };
        if info.pid != pid || info.tgid != pid || pid == KTHREADD_PID || info.ppid == KTHREADD_PID {
            return false;
        }
        let ns = self.procfs.pid_ns(pid);
        if ns.is_none() || ns != self.own_pid_ns {
            return false;
        }
        let cmdline = self.procfs.read(pid, "cmdline").map(Argv::from_cmdline);
        let names = self.settings.record_thread_names;
        let main_thread = !self.settings.skip_main_thread_message;
        let mut comm = None;
        let cmdline_is_comm = cmdline.as_ref().is_none_or(|c| c.is_empty());
        if cmdline_is_comm || (names && main_thread) {
            comm = self.procfs.read_comm(pid);
            if comm.is_none() {
                return true; // Gone meanwhile (counted by the read).
            }
        }
        let cmdline = match cmdline {
            Some(c) if !c.is_empty() => c,
            _ => Argv::from_args([comm.as_deref().unwrap_or_default()]),
        };
        let threads = self.procfs.thread_count(pid);
        let start_from_boot_ns = if self.settings.record_process_age {
            self.read_start_time(pid)
        } else {
            None
        };
        tree.processes.push(TreeProcess {
            pid,
            ppid: info.ppid,
            uid: i32::try_from(info.ruid).unwrap_or(0),
            cmdline,
            cmdline_is_comm,
            nspid: Vec::new(),
            start_from_boot_ns,
            // Only children of kthreadd can be kernel threads.
            is_kthread: Some(false),
        });
        if main_thread {
            tree.threads.push(TreeThread {
                tid: pid,
                tgid: pid,
                name: if names { comm } else { None },
                nstid: Vec::new(),
            });
        }
        self.seen.insert(pid, pid);
        if threads != Some(1) {
            self.write_threads(tree, pid, false);
        }
        true
    }
}

//! CLONE_SNAPSHOT sessions: on each trigger hit the service reports, the
//! client clones the session into `OUT.0`, `OUT.1`, ... (as upstream's
//! perfetto does) while the session keeps running.

use super::attach;
use super::options::{CloneTarget, Output, TracePlan};
use crate::pb::protos::mod_ObservableEvents::CloneTriggerHit;
use crate::pb::protos::mod_TraceConfig::mod_TriggerConfig::TriggerMode;
use crate::schema::trigger::trigger_mode;

pub struct Snapshots {
    socket: String,
    path: String,
    no_clobber: bool,
    count: u32,
    pub failed: u32,
}

impl Snapshots {
    /// Some for a CLONE_SNAPSHOT session written to `-o PATH`.
    pub fn for_plan(plan: &TracePlan, socket: &str) -> Option<Snapshots> {
        if trigger_mode(&plan.config) != TriggerMode::CLONE_SNAPSHOT {
            return None;
        }
        match &plan.output {
            Some(Output::File { path, no_clobber }) => Some(Snapshots {
                socket: socket.to_owned(),
                path: path.clone(),
                no_clobber: *no_clobber,
                count: 0,
                failed: 0,
            }),
            _ => {
                eprintln!(
                    "CLONE_SNAPSHOT triggers need -o PATH: snapshots go to PATH.0, PATH.1, ..."
                );
                None
            }
        }
    }

    /// Clones the session the trigger hit into the next file (on a
    /// connection of its own: ours is attached to the session).
    pub fn take(&mut self, hit: &CloneTriggerHit) {
        let Some(id) = hit.tracing_session_id.filter(|&i| i > 0) else {
            return;
        };
        let out = Output::File {
            path: format!("{}.{}", self.path, self.count),
            no_clobber: self.no_clobber,
        };
        self.count += 1;
        if attach::clone_for(
            &self.socket,
            &CloneTarget::Id(id as u64),
            false,
            Some(hit),
            &out,
        ) != 0
        {
            self.failed += 1;
        }
    }

    /// One line naming the snapshot files and any that failed.
    pub fn report(&self) {
        let failed = match self.failed {
            0 => String::new(),
            n => format!(", {n} failed"),
        };
        match self.count {
            0 => eprintln!("No snapshot was taken (no CLONE_SNAPSHOT trigger hit)"),
            1 => eprintln!("1 snapshot: {}.0{failed}", self.path),
            n => eprintln!(
                "{n} snapshots: {p}.0 to {p}.{}{failed}",
                n - 1,
                p = self.path
            ),
        }
    }
}

//! Names, within a second of the start, what the session will not record
//! as asked: data source names no producer offers and what data sources'
//! setup could not do (unknown ftrace events, categories, group wildcards
//! that match nothing, an ftrace instance another process owns). traced
//! passes them as `ObservableEvents` (tracebox extension fields); the
//! end-of-trace line names them again from the trace.

use super::trace_faults::suggest;
use crate::pb::protos::ObservableEvents;

/// Lines already printed (each problem once).
#[derive(Debug, Default)]
pub struct StartProblems {
    seen: Vec<String>,
}

/// How each line starts.
pub const PREFIX: &str = "NOT RECORDING AS ASKED:";

impl StartProblems {
    /// The new lines `ev` brings, each starting with [`PREFIX`].
    pub fn observe(&mut self, ev: &ObservableEvents) -> Vec<String> {
        let mut lines = Vec::new();
        for ds in &ev.tracebox_data_sources_not_offered {
            let hint = suggest(ds).map_or(String::new(), |s| format!(" (did you mean {s}?)"));
            lines.push(format!("no producer offers data source {ds}{hint}"));
        }
        for change in &ev.instance_state_changes {
            let ds = change.data_source_name.as_deref().unwrap_or("?");
            let producer = change.producer_name.as_deref().unwrap_or("?");
            for p in &change.tracebox_setup_problems {
                lines.push(format!("{ds} in {producer}: {p}"));
            }
        }
        lines.retain(|l| {
            let new = !self.seen.contains(l);
            if new && self.seen.len() < 64 {
                self.seen.push(l.clone());
            }
            new
        });
        lines.into_iter().map(|l| format!("{PREFIX} {l}")).collect()
    }

    /// True once any problem was named.
    pub fn any(&self) -> bool {
        !self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::protos::mod_ObservableEvents::DataSourceInstanceStateChange;

    #[test]
    fn names_each_problem_once_with_a_hint() {
        let mut p = StartProblems::default();
        let ev = ObservableEvents {
            tracebox_data_sources_not_offered: vec!["linux.ftrce".into()],
            instance_state_changes: vec![DataSourceInstanceStateChange {
                producer_name: Some("traced_probes".into()),
                data_source_name: Some("linux.ftrace".into()),
                tracebox_setup_problems: vec!["unknown ftrace events: shed".into()],
                ..Default::default()
            }],
            ..Default::default()
        };
        let lines = p.observe(&ev);
        assert_eq!(
            lines,
            [
                "NOT RECORDING AS ASKED: no producer offers data source linux.ftrce \
                 (did you mean linux.ftrace?)",
                "NOT RECORDING AS ASKED: linux.ftrace in traced_probes: unknown ftrace \
                 events: shed",
            ]
        );
        assert!(p.observe(&ev).is_empty());
        assert!(p.any());
    }
}

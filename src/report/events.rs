//! `--events`: one line per event in time order, laid out as
//! `trace-cmd report` does (task-pid, [cpu], seconds.micros, event, fields).

use std::collections::HashMap;
use std::fmt::Write;

use super::ftrace::{event_name, Ev, Rec, NO_CPU};
use super::meta::Task;
use super::Walk;
use crate::protozero::decode::{read_varint, FieldIter};
use crate::traced_probes::ftrace::parse::table::{ProtoType, EVENTS};

/// Which events to print (empty lists mean all).
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub names: Vec<String>,
    pub pids: Vec<i32>,
    pub cpus: Vec<u32>,
    pub since: u64,
    pub until: u64,
}

/// Per-cpu running task and per-thread priority, for compact_sched
/// events that leave them out; each thread's name as of the current event.
#[derive(Default)]
pub struct Printer {
    running: Vec<i32>,
    prio: HashMap<i32, i32>,
    /// `Task.comm` only (the map type Meta has: no new instantiation).
    comm: HashMap<i32, Task>,
    pub printed: u64,
}

/// `prev_state` as the kernel's sched_switch format prints it.
fn state(s: i64) -> String {
    let mut out: String = "SDTtXZPI"
        .chars()
        .enumerate()
        .filter(|(i, _)| s & (1 << i) != 0)
        .map(|(_, c)| c)
        .take(1)
        .collect();
    if out.is_empty() {
        out.push('R');
    }
    if s & 0x100 != 0 {
        out.push('+');
    }
    out
}

fn name_of(r: &Rec, generic: &[String]) -> String {
    match &r.ev {
        Ev::Switch { .. } => "sched_switch".into(),
        Ev::Waking { wakeup: true, .. } => "sched_wakeup".into(),
        Ev::Waking { .. } => "sched_waking".into(),
        Ev::Print(_) => "print".into(),
        Ev::Track(..) | Ev::Comm(_) => "track_event".into(),
        Ev::Other { id, .. } => event_name(*id, generic).into(),
    }
}

/// `name=value` for each payload field the event table knows.
fn fields(id: u32, raw: &[u8], out: &mut String) {
    let info = EVENTS.iter().find(|e| e.proto_field_id == id);
    for f in FieldIter::new(raw) {
        let fi = info.and_then(|e| e.fields.iter().find(|x| x.proto_field_id == f.number));
        let name = fi.map_or("", |x| x.ftrace_name);
        let v = read_varint(f.value).map_or(0, |v| v.0);
        let _ = match fi.map(|x| x.proto_type) {
            _ if f.wire_type == 2 => write!(out, " {name}={}", String::from_utf8_lossy(f.value)),
            Some(ProtoType::Int32 | ProtoType::Int64) => write!(out, " {name}={}", v as i64),
            Some(ProtoType::Sint32 | ProtoType::Sint64) => {
                write!(out, " {name}={}", (v >> 1) as i64 ^ -((v & 1) as i64))
            }
            None => write!(out, " {}={v}", f.number),
            _ => write!(out, " {name}={v}"),
        };
    }
}

impl Printer {
    /// The name `tid` had at the current event (the latest name of the
    /// trace when no event named it yet).
    fn name(&self, tid: i32, w: &Walk) -> String {
        match self.comm.get(&tid) {
            Some(t) => t.comm.clone(),
            None if tid < 0 => "<...>".into(),
            None => w.name(tid),
        }
    }

    /// The line for `r`, or `None` if the filter drops it.
    pub fn line(&mut self, r: &Rec, w: &Walk, f: &Filter) -> Option<String> {
        if let Ev::Comm(name) = &r.ev {
            if self.comm.len() < super::meta::MAX_ENTRIES || self.comm.contains_key(&r.pid) {
                self.comm.entry(r.pid).or_default().comm = name.to_string();
            }
            return None;
        }
        let mut task = if r.pid >= 0 {
            r.pid
        } else {
            *self.running.get(r.cpu as usize).unwrap_or(&-1)
        };
        if let Ev::Switch {
            prev_pid,
            next_pid,
            next_prio,
            ..
        } = r.ev
        {
            if prev_pid >= 0 {
                task = prev_pid;
            }
            let c = r.cpu as usize;
            if self.running.len() <= c {
                self.running.resize(c + 1, -1);
            }
            self.running[c] = next_pid;
            self.prio.insert(next_pid, next_prio);
        }
        if r.ts < f.since || r.ts > f.until {
            return None;
        }
        if !f.cpus.is_empty() && !f.cpus.contains(&r.cpu) {
            return None;
        }
        let name = name_of(r, &w.bundles.generic_names);
        if !f.names.is_empty() && !f.names.contains(&name) {
            return None;
        }
        let other = match r.ev {
            Ev::Switch { next_pid, .. } => next_pid,
            Ev::Waking { pid, .. } => pid,
            _ => task,
        };
        if !f.pids.is_empty() && !f.pids.contains(&task) && !f.pids.contains(&other) {
            return None;
        }
        let mut s = String::with_capacity(128);
        let comm = self.name(task, w);
        let cpu = match r.cpu {
            NO_CPU => "---".into(),
            c => format!("{c:03}"),
        };
        let _ = write!(
            s,
            "{comm:>16}-{task:<5} [{cpu}] {:>5}.{:06}: {:<21}",
            r.ts / 1_000_000_000,
            r.ts % 1_000_000_000 / 1000,
            name + ":"
        );
        let _ = match &r.ev {
            Ev::Switch {
                prev_state,
                next_pid,
                next_prio,
                ..
            } => {
                let pc = self.name(task, w);
                let pp = self.prio.get(&task).copied().unwrap_or(120);
                write!(
                    s,
                    " {pc}:{task} [{pp}] {} ==> {}:{next_pid} [{next_prio}]",
                    state(*prev_state),
                    self.name(*next_pid, w)
                )
            }
            Ev::Waking {
                pid,
                target_cpu,
                prio,
                ..
            } => write!(
                s,
                " comm={} pid={pid} prio={prio} target_cpu={target_cpu:03}",
                self.name(*pid, w)
            ),
            Ev::Print(buf) => write!(s, " tracing_mark_write: {}", buf.trim_end_matches('\n')),
            Ev::Other { id, raw } => {
                fields(*id, raw, &mut s);
                Ok(())
            }
            Ev::Track(kind, name) => {
                let k = ["?", "B", "E", "I", "C"]
                    .get(*kind as usize)
                    .unwrap_or(&"?");
                write!(s, " {k} {name}")
            }
            Ev::Comm(_) => Ok(()),
        };
        self.printed += 1;
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_print_like_the_kernel() {
        assert_eq!(state(0), "R");
        assert_eq!(state(1), "S");
        assert_eq!(state(2), "D");
        assert_eq!(state(0x100), "R+");
    }
}

//! The compile-time event table: which kernel events have a typed payload in
//! `FtraceEvent`, and which proto field each kernel field feeds. Generated
//! at build time from our .proto files and `proto/trace/ftrace/event_map.txt`
//! by `src/codegen/ftrace_table.rs`.

/// Proto scalar types a payload field can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtoType {
    Int32,
    Int64,
    Uint32,
    Uint64,
    Sint32,
    Sint64,
    Bool,
    String,
    Bytes,
}

/// One payload field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldInfo {
    /// Name of the field in the kernel's format file.
    pub ftrace_name: &'static str,
    /// Field number in the payload message.
    pub proto_field_id: u32,
    pub proto_type: ProtoType,
    pub repeated: bool,
}

/// One event with a typed payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventInfo {
    pub group: &'static str,
    pub name: &'static str,
    /// Field number of the payload in `FtraceEvent`.
    pub proto_field_id: u32,
    pub fields: &'static [FieldInfo],
}

include!(concat!(env!("OUT_DIR"), "/ftrace_table.rs"));

/// `FtraceEvent` fields common to every event.
pub mod ftrace_event {
    pub const TIMESTAMP: u32 = 1;
    pub const PID: u32 = 2;
    pub const PRINT: u32 = 3;
    pub const GENERIC: u32 = 327;
}

/// Looks an event up by group and name.
pub fn find(group: &str, name: &str) -> Option<&'static EventInfo> {
    EVENTS.iter().find(|e| e.group == group && e.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_table() {
        let sw = find("sched", "sched_switch").unwrap();
        assert_eq!(sw.proto_field_id, 4);
        let names: Vec<_> = sw
            .fields
            .iter()
            .map(|f| (f.ftrace_name, f.proto_field_id))
            .collect();
        assert_eq!(
            names,
            [
                ("prev_comm", 1),
                ("prev_pid", 2),
                ("prev_prio", 3),
                ("prev_state", 4),
                ("next_comm", 5),
                ("next_pid", 6),
                ("next_prio", 7)
            ]
        );
        assert_eq!(sw.fields[3].proto_type, ProtoType::Int64);
        let print = find("ftrace", "print").unwrap();
        assert_eq!(print.proto_field_id, ftrace_event::PRINT);
        // `!ip` in the map: only buf.
        assert_eq!(print.fields.len(), 1);
        assert_eq!(
            (print.fields[0].ftrace_name, print.fields[0].proto_field_id),
            ("buf", 2)
        );
        let enter = find("raw_syscalls", "sys_enter").unwrap();
        assert_eq!(enter.proto_field_id, 329);
        assert!(enter.fields[1].repeated);
        assert_eq!(find("power", "gpu_frequency").unwrap().proto_field_id, 332);
        assert_eq!(
            find("sched", "sched_migrate_task").unwrap().proto_field_id,
            491
        );
        assert!(find("sched", "no_such_event").is_none());
        assert!(EVENTS.len() >= 49, "{}", EVENTS.len());
        let mut ids: Vec<_> = EVENTS.iter().map(|e| e.proto_field_id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), EVENTS.len());
    }
}

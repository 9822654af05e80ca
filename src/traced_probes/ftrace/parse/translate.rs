//! Runtime translation table: the compile-time [`table`](super::table)
//! merged with the running kernel's format files, plus per-field encoding
//! of raw event records into protobuf.
//!
//! Pure: format texts come in through a closure, so tests can feed files
//! from any kernel.

use std::collections::HashMap;

use super::format::{parse_format, EventFormat, Field, FieldType};
use super::packet_buf::PacketBuf;
use super::table::{self, EventInfo, ProtoType};

/// How an event is written into `FtraceEvent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Typed payload in `FtraceEvent` field `n`.
    Typed(u32),
    /// Legacy self-describing `GenericFtraceEvent` (field 327).
    Generic,
    /// One of our kprobes: `KprobeEvent {name, type}` (field 542); the
    /// type is the data source's (see `EventFilter::kprobe_type`).
    Kprobe,
}

/// One kernel field and where it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldTranslation {
    pub name: String,
    pub offset: u16,
    pub size: u16,
    pub ftrace_type: FieldType,
    pub proto_field_id: u32,
    /// `None` for generic events (the value kind picks the oneof member).
    pub proto_type: Option<ProtoType>,
    pub repeated: bool,
}

/// One kernel event (by ftrace id) and how to translate it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventTranslation {
    pub group: String,
    pub name: String,
    pub ftrace_id: u32,
    pub target: Target,
    pub fields: Vec<FieldTranslation>,
    /// The parsed kernel format (compact sched looks at it).
    pub format: EventFormat,
}

/// Whether a kernel field type can be written as a proto type (the same
/// pairs traced_probes accepts; anything else drops the field).
pub fn compatible(ft: FieldType, pt: ProtoType) -> bool {
    use FieldType as F;
    use ProtoType as P;
    matches!(
        (ft, pt),
        (F::CommonPid32 | F::Pid32, P::Int32 | P::Int64)
            | (F::Inode32 | F::Inode64 | F::DevId32 | F::DevId64, P::Uint64)
            | (
                F::Uint8 | F::Uint16 | F::Uint32 | F::Bool,
                P::Uint32 | P::Uint64
            )
            | (F::Uint64, P::Uint64)
            | (F::Int8 | F::Int16 | F::Int32, P::Int32 | P::Int64)
            | (F::Int64, P::Int64)
            | (
                F::FixedCString | F::CString | F::StringPtr | F::DataLocString,
                P::String
            )
            | (F::DataLocBytes, P::Bytes)
            | (F::SymAddr32 | F::SymAddr64, P::Uint64)
    )
}

/// Where `common_pid` lives when no format says otherwise.
const DEFAULT_COMMON_PID_OFFSET: u16 = 4;

/// Ftrace ids are 16 bits on the page; the dense index covers them all.
const MAX_FTRACE_ID: u32 = u16::MAX as u32;

/// All events known to one tracefs instance, indexed by ftrace id.
#[derive(Debug, Default)]
pub struct TranslationTable {
    events: Vec<EventTranslation>,
    /// ftrace id -> position in `events` + 1 (0 = unknown). A flat array:
    /// it is looked up once per event on the hot path.
    by_id: Vec<u32>,
    by_name: HashMap<(String, String), u32>,
    /// (event, reason) for events of the compile-time table the kernel has
    /// but whose format could not be used.
    pub failed: Vec<String>,
    /// Offset of `common_pid` (from the first parsed format).
    pub common_pid_offset: u16,
    /// Offset of `common_flags`.
    pub common_flags_offset: Option<u16>,
    /// `printk_formats`: kernel string addresses → text.
    printk_formats: HashMap<u64, String>,
    /// Set when ftrace/print has its usual shape (see [`PrintLayout`]).
    pub print_layout: Option<PrintLayout>,
}

/// ftrace/print written as `FtraceEvent.print { buf }` from a C string
/// at a fixed offset: the layout of every kernel seen. trace_marker
/// floods are the heaviest load, so the bundler writes these without
/// the per-field dispatch; any other shape takes the generic path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrintLayout {
    pub ftrace_id: u32,
    pub buf_offset: u16,
    pub buf_proto_field: u32,
}

impl PrintLayout {
    /// The layout of the ftrace/print translation `ev`, if usual.
    fn of(ev: &EventTranslation) -> Option<PrintLayout> {
        let [f] = &ev.fields[..] else {
            return None;
        };
        let plain = f.ftrace_type == FieldType::CString
            && f.proto_type == Some(ProtoType::String)
            && !f.repeated;
        plain.then_some(PrintLayout {
            ftrace_id: ev.ftrace_id,
            buf_offset: f.offset,
            buf_proto_field: f.proto_field_id,
        })
    }
}

impl TranslationTable {
    /// Merges the compile-time table with the kernel: `read_format(group,
    /// name)` returns the format text or `None` if the kernel lacks the
    /// event. Fields missing in the kernel or with no usable type are
    /// dropped; unreadable events are dropped and listed in `failed`, except
    /// `ftrace/print`, which falls back to its well-known layout.
    pub fn build(read_format: &dyn Fn(&str, &str) -> Option<String>) -> TranslationTable {
        let mut t = TranslationTable {
            common_pid_offset: DEFAULT_COMMON_PID_OFFSET,
            ..Default::default()
        };
        for info in table::EVENTS {
            let parsed = read_format(info.group, info.name).map(|text| parse_format(&text));
            match parsed {
                Some(Ok(format)) => t.insert(typed_translation(info, format)),
                Some(Err(e)) => {
                    if !t.print_fallback(info) {
                        t.failed.push(format!("{}/{}: {e}", info.group, info.name));
                    }
                }
                None => {
                    t.print_fallback(info);
                }
            }
        }
        t
    }

    fn print_fallback(&mut self, info: &EventInfo) -> bool {
        if (info.group, info.name) != ("ftrace", "print") {
            return false;
        }
        let format = EventFormat {
            name: "print".into(),
            id: 5,
            common_fields: vec![],
            fields: vec![Field {
                type_and_name: "char buf".into(),
                name: "buf".into(),
                offset: 16,
                size: 0,
                signed: false,
                ty: Some(FieldType::CString),
            }],
            print_fmt: None,
        };
        self.insert(typed_translation(info, format));
        true
    }

    fn insert(&mut self, ev: EventTranslation) {
        if self.by_name.is_empty() {
            if let Some(f) = ev
                .format
                .common_fields
                .iter()
                .find(|f| f.name == "common_pid")
            {
                self.common_pid_offset = f.offset;
            }
            let flags = ev
                .format
                .common_fields
                .iter()
                .find(|f| f.name == "common_flags");
            self.common_flags_offset = flags.map(|f| f.offset);
        }
        if ev.ftrace_id > MAX_FTRACE_ID {
            // No page can carry it.
            return;
        }
        let id = ev.ftrace_id as usize;
        if self.by_id.len() <= id {
            self.by_id.resize(id + 1, 0);
        }
        self.by_name
            .insert((ev.group.clone(), ev.name.clone()), ev.ftrace_id);
        if (ev.group.as_str(), ev.name.as_str()) == ("ftrace", "print") {
            self.print_layout = PrintLayout::of(&ev);
        }
        match self.by_id[id] {
            0 => {
                self.events.push(ev);
                self.by_id[id] = self.events.len() as u32;
            }
            i => self.events[i as usize - 1] = ev,
        }
    }

    /// Adds an event without a typed payload, written as a generic event.
    /// Returns its ftrace id.
    pub fn add_generic(
        &mut self,
        group: &str,
        name: &str,
        format_text: &str,
    ) -> Result<u32, super::format::FormatError> {
        if let Some(&id) = self.by_name.get(&(group.to_string(), name.to_string())) {
            return Ok(id);
        }
        let format = parse_format(format_text)?;
        let fields = format
            .fields
            .iter()
            .enumerate()
            .filter_map(|(i, f)| {
                Some(FieldTranslation {
                    name: f.name.clone(),
                    offset: f.offset,
                    size: f.size,
                    ftrace_type: f.ty?,
                    proto_field_id: i as u32 + 1,
                    proto_type: None,
                    repeated: false,
                })
            })
            .collect();
        let id = format.id;
        self.insert(EventTranslation {
            group: group.into(),
            name: name.into(),
            ftrace_id: id,
            target: Target::Generic,
            fields,
            format,
        });
        Ok(id)
    }

    /// Adds one of our kprobe events (its fields are not recorded, as
    /// upstream). Returns its ftrace id.
    pub fn add_kprobe(
        &mut self,
        group: &str,
        name: &str,
        format_text: &str,
    ) -> Result<u32, super::format::FormatError> {
        let format = parse_format(format_text)?;
        let id = format.id;
        self.insert(EventTranslation {
            group: group.into(),
            name: name.into(),
            ftrace_id: id,
            target: Target::Kprobe,
            fields: Vec::new(),
            format,
        });
        Ok(id)
    }

    pub fn set_printk_formats(&mut self, map: HashMap<u64, String>) {
        self.printk_formats = map;
    }

    #[inline]
    pub fn event(&self, ftrace_id: u32) -> Option<&EventTranslation> {
        let i = *self.by_id.get(ftrace_id as usize)?;
        self.events.get((i as usize).checked_sub(1)?)
    }

    pub fn event_by_name(&self, group: &str, name: &str) -> Option<&EventTranslation> {
        self.event(*self.by_name.get(&(group.to_string(), name.to_string()))?)
    }

    /// All events, in no particular order.
    pub fn events(&self) -> impl Iterator<Item = &EventTranslation> {
        self.events.iter()
    }

    pub fn lookup_printk(&self, addr: u64) -> &str {
        self.printk_formats
            .get(&addr)
            .map(String::as_str)
            .unwrap_or("")
    }
}

fn typed_translation(info: &EventInfo, format: EventFormat) -> EventTranslation {
    let mut fields = Vec::new();
    for fi in info.fields {
        let Some(kf) = format.fields.iter().find(|f| f.name == fi.ftrace_name) else {
            continue;
        };
        let Some(ft) = kf.ty else { continue };
        let ft = funcgraph_func(info, &kf.name, ft);
        if !compatible(ft, fi.proto_type) {
            continue;
        }
        fields.push(FieldTranslation {
            name: kf.name.clone(),
            offset: kf.offset,
            size: kf.size,
            ftrace_type: ft,
            proto_field_id: fi.proto_field_id,
            proto_type: Some(fi.proto_type),
            repeated: fi.repeated,
        });
    }
    EventTranslation {
        group: info.group.into(),
        name: info.name.into(),
        ftrace_id: format.id,
        target: Target::Typed(info.proto_field_id),
        fields,
        format,
    }
}

/// The function of `ftrace/funcgraph_*` is an `unsigned long`, but a
/// kernel address all the same: interned (and named with
/// `symbolize_ksyms`) as upstream does.
fn funcgraph_func(info: &EventInfo, field: &str, ft: FieldType) -> FieldType {
    let funcgraph = info.group == "ftrace" && info.name.starts_with("funcgraph_");
    match ft {
        FieldType::Uint64 if funcgraph && field == "func" => FieldType::SymAddr64,
        FieldType::Uint32 if funcgraph && field == "func" => FieldType::SymAddr32,
        ft => ft,
    }
}

/// Parses `printk_formats` lines: `0xffffffff81234567 : "text"`.
pub fn parse_printk_formats(text: &str) -> HashMap<u64, String> {
    let mut map = HashMap::new();
    for line in text.lines() {
        let Some((addr, s)) = line.split_once(" : ") else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr.trim().trim_start_matches("0x"), 16) else {
            continue;
        };
        let s = s.trim();
        let s = s
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .unwrap_or(s);
        map.insert(addr, s.replace("\\n", "\n"));
    }
    map
}

/// Kernel `dev_t` (major << 20 | minor) to the userspace (glibc makedev)
/// encoding that `stat()` reports.
pub fn kernel_dev_to_userspace(kdev: u64) -> u64 {
    let major = kdev >> 20;
    let minor = kdev & ((1 << 20) - 1);
    ((major & 0xffff_f000) << 32)
        | ((major & 0xfff) << 8)
        | ((minor & 0xffff_ff00) << 12)
        | (minor & 0xff)
}

/// Reads `size` (1, 2, 4 or 8) little-endian bytes at `offset`.
#[inline]
pub fn read_uint(record: &[u8], offset: usize, size: usize) -> Option<u64> {
    let b = record.get(offset..offset.checked_add(size)?)?;
    Some(match size {
        1 => b[0] as u64,
        2 => u16::from_le_bytes([b[0], b[1]]) as u64,
        4 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64,
        8 => u64::from_le_bytes(b.try_into().ok()?),
        _ => return None,
    })
}

/// As [`read_uint`], sign-extended.
#[inline]
pub fn read_int(record: &[u8], offset: usize, size: usize) -> Option<i64> {
    let v = read_uint(record, offset, size)?;
    let shift = 64 - 8 * size as u32;
    Some(((v << shift) as i64) >> shift)
}

/// Bytes up to the first NUL.
#[inline(always)]
pub fn until_nul(b: &[u8]) -> &[u8] {
    // Eight bytes per step (messages are tens of bytes): a word has a zero
    // byte iff (w - 0x01..) & !w & 0x80.. is non-zero.
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let mut at = 0;
    for w in b.chunks_exact(8) {
        let v = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        if v.wrapping_sub(LO) & !v & HI != 0 {
            break;
        }
        at += 8;
    }
    match b[at..].iter().position(|&c| c == 0) {
        Some(n) => &b[..at + n],
        None => b,
    }
}

/// A decoded field value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    Int(i64),
    Uint(u64),
    Str(&'a [u8]),
}

/// Things noticed while translating, handed to process/inode scrapers.
#[derive(Debug, Default, Clone)]
pub struct Metadata {
    pub pids: Vec<i32>,
    pub inodes: Vec<u64>,
    pub devices: Vec<u64>,
    /// Kernel addresses seen in symbol fields, interned on the data
    /// source's sequence: every cpu of one source holds the same handle
    /// (see [`KernelAddrs::shared`]).
    pub kernel: SharedKernelAddrs,
}

/// One data source's [`KernelAddrs`], shared by the states of its cpus.
pub type SharedKernelAddrs = std::rc::Rc<std::cell::RefCell<KernelAddrs>>;

/// Kernel addresses interned on one packet sequence: the trace carries the
/// 1-based position in `addrs` instead of the address (so KASLR does not
/// leak). Shared by all cpus of a data source, since they share a writer.
#[derive(Debug, Default, Clone)]
pub struct KernelAddrs {
    pub addrs: Vec<u64>,
    index: HashMap<u64, u32>,
    /// How many of `addrs` were already emitted as `kernel_symbols`.
    pub written: usize,
    /// Whether the sequence already got its SEQ_INCREMENTAL_STATE_CLEARED.
    pub sequence_started: bool,
    /// ClearIncrementalState came: the next bundle is marked
    /// SEQ_INCREMENTAL_STATE_CLEARED even without interned data, so that
    /// at a rotation cut everything from it on goes to the new file.
    pub clear_pending: bool,
}

impl KernelAddrs {
    /// A fresh interning table for one sequence, to hand to every cpu.
    pub fn shared() -> SharedKernelAddrs {
        SharedKernelAddrs::default()
    }
}

impl Metadata {
    /// Records a pid for the process scrapers. Runs of the same pid (one
    /// busy task) are stored once; the consumer dedups the rest.
    #[inline(always)]
    pub fn push_pid(&mut self, pid: i32) {
        if self.pids.last() != Some(&pid) {
            self.pids.push(pid);
        }
    }

    fn intern_addr(&mut self, addr: u64) -> u32 {
        let mut k = self.kernel.borrow_mut();
        if let Some(&i) = k.index.get(&addr) {
            return i;
        }
        k.addrs.push(addr);
        let i = k.addrs.len() as u32;
        k.index.insert(addr, i);
        i
    }

    pub fn clear(&mut self) {
        self.pids.clear();
        self.inodes.clear();
        self.devices.clear();
    }
}

/// Decodes one field of `record`. `None`: the record is too short or a
/// `__data_loc` points outside it.
pub fn read_value<'a>(
    record: &'a [u8],
    f: &FieldTranslation,
    table: &'a TranslationTable,
    meta: &mut Metadata,
) -> Option<Value<'a>> {
    use FieldType as F;
    let (off, size) = (f.offset as usize, f.size as usize);
    Some(match f.ftrace_type {
        F::Int8 | F::Int16 | F::Int32 | F::Int64 => Value::Int(read_int(record, off, size)?),
        F::Pid32 | F::CommonPid32 => {
            let pid = read_int(record, off, 4)?;
            meta.push_pid(pid as i32);
            Value::Int(pid)
        }
        F::Uint8 | F::Uint16 | F::Uint32 | F::Uint64 | F::Bool => {
            Value::Uint(read_uint(record, off, size)?)
        }
        F::Inode32 | F::Inode64 => {
            let ino = read_uint(record, off, size)?;
            meta.inodes.push(ino);
            Value::Uint(ino)
        }
        F::DevId32 | F::DevId64 => {
            let dev = kernel_dev_to_userspace(read_uint(record, off, size)?);
            meta.devices.push(dev);
            Value::Uint(dev)
        }
        F::SymAddr32 | F::SymAddr64 => {
            Value::Uint(meta.intern_addr(read_uint(record, off, size)?) as u64)
        }
        F::FixedCString => Value::Str(until_nul(record.get(off..off.checked_add(size)?)?)),
        F::CString => Value::Str(until_nul(record.get(off..)?)),
        F::StringPtr => {
            let addr = read_uint(record, off, size.min(8))?;
            Value::Str(table.lookup_printk(addr).as_bytes())
        }
        F::DataLocString | F::DataLocBytes => {
            let loc = read_uint(record, off, 4)?;
            let start = (loc & 0xffff) as usize;
            let len = (loc >> 16) as usize;
            let b = record.get(start..start + len)?;
            match f.ftrace_type {
                F::DataLocString => Value::Str(until_nul(b)),
                _ => Value::Str(b),
            }
        }
    })
}

/// Writes one scalar as proto field `id` of type `pt`.
#[inline]
fn put_value(s: &mut PacketBuf, id: u32, pt: ProtoType, v: Value<'_>) {
    match (pt, v) {
        (_, Value::Str(b)) => s.bytes(id, b),
        (ProtoType::Int32, Value::Int(i)) => s.varint(id, i as i32 as i64 as u64),
        (ProtoType::Sint32 | ProtoType::Sint64, Value::Int(i)) => s.sint(id, i),
        (ProtoType::Uint32, Value::Uint(u)) => s.varint(id, u as u32 as u64),
        (_, Value::Int(i)) => s.varint(id, i as u64),
        (_, Value::Uint(u)) => s.varint(id, u),
    }
}

/// Writes the payload fields of a typed event. `None` if the record does
/// not hold the fields its format promised.
pub fn write_typed_fields(
    s: &mut PacketBuf,
    ev: &EventTranslation,
    record: &[u8],
    table: &TranslationTable,
    meta: &mut Metadata,
) -> Option<()> {
    for f in &ev.fields {
        let pt = f.proto_type?;
        if f.repeated {
            // `unsigned long args[6]`: elements of 4 or 8 bytes.
            let width = if f.ftrace_type == FieldType::Uint64 {
                8
            } else {
                4
            };
            for i in 0..(f.size as usize / width) {
                let v = read_uint(record, f.offset as usize + i * width, width)?;
                s.varint(f.proto_field_id, v);
            }
            continue;
        }
        let v = read_value(record, f, table, meta)?;
        put_value(s, f.proto_field_id, pt, v);
    }
    Some(())
}

/// Writes a `GenericFtraceEvent` body (event_name + name/value fields).
pub fn write_generic_fields(
    s: &mut PacketBuf,
    ev: &EventTranslation,
    record: &[u8],
    table: &TranslationTable,
    meta: &mut Metadata,
) -> Option<()> {
    s.bytes(1, ev.name.as_bytes());
    for f in &ev.fields {
        let v = read_value(record, f, table, meta)?;
        let n = s.begin(2);
        s.bytes(1, f.name.as_bytes());
        match v {
            Value::Str(b) => s.bytes(3, b),
            Value::Int(i) => s.varint(4, i as u64),
            Value::Uint(u) => s.varint(5, u),
        }
        s.end(n);
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_t_and_ints() {
        // 8:1 (sda1) in kernel encoding.
        assert_eq!(kernel_dev_to_userspace((8 << 20) | 1), (8 << 8) | 1);
        // 259:300 → makedev() == 0x11032c.
        assert_eq!(kernel_dev_to_userspace((259 << 20) | 300), 0x11_032c);
        assert_eq!(read_int(&[0xff, 0xff], 0, 2), Some(-1));
        assert_eq!(read_uint(&[0xff, 0xff], 0, 2), Some(0xffff));
        assert_eq!(read_uint(&[1, 2, 3], 1, 4), None);
        assert_eq!(read_uint(&[1, 2, 3], usize::MAX, 4), None);
    }

    #[test]
    fn printk_formats() {
        let m = parse_printk_formats("0xffffffff8a000010 : \"hello\\n\"\nbogus\n0x10 : \"x\"\n");
        assert_eq!(
            m.get(&0xffffffff8a000010).map(String::as_str),
            Some("hello\n")
        );
        assert_eq!(m.get(&0x10).map(String::as_str), Some("x"));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn until_nul_at_every_position() {
        for len in 0..40 {
            let mut b: Vec<u8> = (1..=len as u8).collect();
            assert_eq!(until_nul(&b), &b[..], "no nul, len {len}");
            for nul in 0..len {
                b[nul] = 0;
                assert_eq!(until_nul(&b).len(), nul, "len {len} nul {nul}");
                b[nul] = nul as u8 + 1;
            }
        }
        // High bytes must not look like zeros.
        assert_eq!(until_nul(&[0x80, 0xff, 0x81, 1, 2, 3, 4, 5, 6, 0]).len(), 9);
    }

    #[test]
    fn lookup_by_id_and_name() {
        let mut t = TranslationTable::default();
        let fmt = "name: foo\nID: 700\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:int x;\toffset:8;\tsize:4;\tsigned:1;\n\nprint fmt: \"\"\n";
        assert_eq!(t.add_generic("g", "foo", fmt).unwrap(), 700);
        assert_eq!(t.event(700).map(|e| e.name.as_str()), Some("foo"));
        assert_eq!(t.event_by_name("g", "foo").map(|e| e.ftrace_id), Some(700));
        assert!(t.event(699).is_none());
        assert!(t.event(0).is_none());
        assert!(t.event(u32::MAX).is_none());
        assert_eq!(t.events().count(), 1);
    }

    #[test]
    fn strategy_pairs() {
        assert!(compatible(FieldType::Pid32, ProtoType::Int32));
        assert!(compatible(FieldType::Uint8, ProtoType::Uint32));
        assert!(!compatible(FieldType::Uint32, ProtoType::Int32));
        assert!(!compatible(FieldType::Int64, ProtoType::Uint64));
        assert!(compatible(FieldType::DevId32, ProtoType::Uint64));
        assert!(!compatible(FieldType::DataLocString, ProtoType::Uint32));
    }
}

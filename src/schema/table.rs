//! Static tables generated from proto/ by build.rs, and their accessors.
//!
//! Message and enum names live in one string blob; descriptors refer to it
//! by 16-bit offset (fields take 10 bytes). Field names and enum values
//! (1,700, statsd's AtomId most of them) are stored zlib-compressed, 17 KB
//! instead of 74 KB, and unpacked on first use: only text configs and the
//! JSON dump read them, while IPC checks look up messages on every call.

/// Package of every message and enum; stored names omit it.
pub const PACKAGE: &str = "perfetto.protos";

/// Field type, numbered like `google.protobuf.FieldDescriptorProto.Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    Double = 1,
    Float = 2,
    Int64 = 3,
    Uint64 = 4,
    Int32 = 5,
    Fixed64 = 6,
    Fixed32 = 7,
    Bool = 8,
    String = 9,
    Message = 11,
    Bytes = 12,
    Uint32 = 13,
    Enum = 14,
    Sfixed32 = 15,
    Sfixed64 = 16,
    Sint32 = 17,
    Sint64 = 18,
}

impl FieldType {
    fn from_u8(v: u8) -> FieldType {
        use FieldType::*;
        match v {
            1 => Double,
            2 => Float,
            3 => Int64,
            4 => Uint64,
            5 => Int32,
            6 => Fixed64,
            7 => Fixed32,
            8 => Bool,
            9 => String,
            11 => Message,
            12 => Bytes,
            13 => Uint32,
            14 => Enum,
            15 => Sfixed32,
            16 => Sfixed64,
            17 => Sint32,
            _ => Sint64,
        }
    }

    /// Name as written in a .proto file.
    pub fn proto_name(self) -> &'static str {
        use FieldType::*;
        match self {
            Double => "double",
            Float => "float",
            Int64 => "int64",
            Uint64 => "uint64",
            Int32 => "int32",
            Fixed64 => "fixed64",
            Fixed32 => "fixed32",
            Bool => "bool",
            String => "string",
            Message => "message",
            Bytes => "bytes",
            Uint32 => "uint32",
            Enum => "enum",
            Sfixed32 => "sfixed32",
            Sfixed64 => "sfixed64",
            Sint32 => "sint32",
            Sint64 => "sint64",
        }
    }
}

/// Field label, numbered like `FieldDescriptorProto.Label`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    Optional = 1,
    Required = 2,
    Repeated = 3,
}

/// One message type.
#[derive(Debug)]
pub struct MessageDesc {
    name_off: u16,
    name_len: u8,
    first_field: u16,
    num_fields: u16,
}

/// One field of a message.
#[derive(Debug)]
pub struct FieldDesc {
    /// In [`Packed::field_names`].
    name_off: u16,
    /// Config and IPC field numbers stay below 65536 (the generator checks).
    number: u16,
    target: u16,
    name_len: u8,
    ty: u8,
    label: u8,
    /// bit 0: packed; bits 1..: 1-based oneof group (0 = none).
    flags: u8,
}

/// One enum type.
#[derive(Debug)]
pub struct EnumDesc {
    name_off: u16,
    name_len: u8,
    first_value: u16,
    num_values: u16,
}

/// One enum value, from the unpacked [`PACKED_Z`].
#[derive(Debug)]
pub struct EnumValueDesc {
    /// Name offset (low 24 bits) and length (high 8 bits) in
    /// [`Packed::value_names`].
    name: u32,
    number: i32,
}

const fn m(name_off: u16, name_len: u8, first_field: u16, num_fields: u16) -> MessageDesc {
    MessageDesc {
        name_off,
        name_len,
        first_field,
        num_fields,
    }
}
const fn f(off: u16, len: u8, number: u16, ty: u8, label: u8, flags: u8, target: u16) -> FieldDesc {
    FieldDesc {
        name_off: off,
        number,
        target,
        name_len: len,
        ty,
        label,
        flags,
    }
}
const fn e(name_off: u16, name_len: u8, first_value: u16, num_values: u16) -> EnumDesc {
    EnumDesc {
        name_off,
        name_len,
        first_value,
        num_values,
    }
}

include!(concat!(env!("OUT_DIR"), "/schema_table.rs"));

/// Field names, and every enum value in table order with its names in
/// one string.
struct Packed {
    field_names: String,
    value_names: String,
    values: Vec<EnumValueDesc>,
}

/// Unpacks [`PACKED_Z`] (format: `packed_z` in
/// src/codegen/schema_emit.rs) once per process.
fn packed() -> &'static Packed {
    static PACKED: std::sync::OnceLock<Packed> = std::sync::OnceLock::new();
    PACKED.get_or_init(|| {
        let text = miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(PACKED_Z, 1 << 20)
            .ok()
            .and_then(|t| String::from_utf8(t).ok())
            .expect("the build's packed names unpack");
        let (field_names, text) = text.split_once('\0').expect("field names end with a NUL");
        let mut values = Vec::with_capacity(NUM_ENUM_VALUES);
        let mut names = String::with_capacity(text.len());
        let mut next = 0i32;
        for line in text.lines() {
            let (name, number) = match line.split_once('=') {
                Some((name, n)) => (name, n.parse().expect("an enum value number")),
                None => (line, next),
            };
            values.push(EnumValueDesc {
                name: names.len() as u32 | (name.len() as u32) << 24,
                number,
            });
            names.push_str(name);
            next = number.wrapping_add(1);
        }
        assert_eq!(values.len(), NUM_ENUM_VALUES);
        Packed {
            field_names: field_names.to_owned(),
            value_names: names,
            values,
        }
    })
}

fn name_at(off: u16, len: u8) -> &'static str {
    &NAMES[off as usize..off as usize + len as usize]
}

fn strip_package(name: &str) -> &str {
    let name = name.strip_prefix('.').unwrap_or(name);
    name.strip_prefix(PACKAGE)
        .and_then(|n| n.strip_prefix('.'))
        .unwrap_or(name)
}

/// Looks up a message by full name (`perfetto.protos.TraceConfig`, with or
/// without the package or a leading dot; nested types as `Outer.Inner`).
pub fn message(name: &str) -> Option<&'static MessageDesc> {
    let name = strip_package(name);
    MESSAGES
        .binary_search_by(|m| m.name().cmp(name))
        .ok()
        .map(|i| &MESSAGES[i])
}

/// Looks up an enum by full name, like [`message`].
pub fn enum_type(name: &str) -> Option<&'static EnumDesc> {
    let name = strip_package(name);
    ENUMS
        .binary_search_by(|e| e.name().cmp(name))
        .ok()
        .map(|i| &ENUMS[i])
}

/// Every message, sorted by name.
pub fn messages() -> &'static [MessageDesc] {
    &MESSAGES
}

/// Every enum, sorted by name.
pub fn enums() -> &'static [EnumDesc] {
    &ENUMS
}

impl MessageDesc {
    /// Name without the package, e.g. `TraceConfig.BufferConfig`.
    pub fn name(&self) -> &'static str {
        name_at(self.name_off, self.name_len)
    }

    /// Fields sorted by number.
    pub fn fields(&self) -> &'static [FieldDesc] {
        let start = self.first_field as usize;
        &FIELDS[start..start + self.num_fields as usize]
    }

    pub fn field_by_name(&self, name: &str) -> Option<&'static FieldDesc> {
        self.fields().iter().find(|f| f.name() == name)
    }

    pub fn field_by_number(&self, number: u32) -> Option<&'static FieldDesc> {
        let fields = self.fields();
        fields
            .binary_search_by_key(&number, |f| u32::from(f.number))
            .ok()
            .map(|i| &fields[i])
    }
}

impl FieldDesc {
    pub fn name(&self) -> &'static str {
        let off = self.name_off as usize;
        &packed().field_names[off..off + self.name_len as usize]
    }

    pub fn number(&self) -> u32 {
        u32::from(self.number)
    }

    pub fn field_type(&self) -> FieldType {
        FieldType::from_u8(self.ty)
    }

    pub fn label(&self) -> Label {
        match self.label {
            2 => Label::Required,
            3 => Label::Repeated,
            _ => Label::Optional,
        }
    }

    pub fn is_repeated(&self) -> bool {
        self.label == Label::Repeated as u8
    }

    /// Declared `[packed = true]`.
    pub fn is_packed(&self) -> bool {
        self.flags & 1 != 0
    }

    /// 1-based index of the oneof this field belongs to, if any.
    pub fn oneof_index(&self) -> Option<u8> {
        let g = self.flags >> 1;
        (g != 0).then_some(g)
    }

    /// Message type of a `Message` field.
    pub fn message_type(&self) -> Option<&'static MessageDesc> {
        (self.ty == FieldType::Message as u8).then(|| &MESSAGES[self.target as usize])
    }

    /// Enum type of an `Enum` field.
    pub fn enum_type(&self) -> Option<&'static EnumDesc> {
        (self.ty == FieldType::Enum as u8).then(|| &ENUMS[self.target as usize])
    }
}

impl EnumDesc {
    /// Name without the package, e.g. `TraceConfig.BufferConfig.FillPolicy`.
    pub fn name(&self) -> &'static str {
        name_at(self.name_off, self.name_len)
    }

    pub fn values(&self) -> &'static [EnumValueDesc] {
        let start = self.first_value as usize;
        &packed().values[start..start + self.num_values as usize]
    }

    pub fn value_by_name(&self, name: &str) -> Option<i32> {
        self.values()
            .iter()
            .find(|v| v.name() == name)
            .map(|v| v.number)
    }

    pub fn value_by_number(&self, number: i32) -> Option<&'static EnumValueDesc> {
        self.values().iter().find(|v| v.number == number)
    }
}

impl EnumValueDesc {
    pub fn name(&self) -> &'static str {
        let off = (self.name & 0xff_ffff) as usize;
        &packed().value_names[off..off + (self.name >> 24) as usize]
    }

    pub fn number(&self) -> i32 {
        self.number
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_up_trace_config() {
        let tc = message("perfetto.protos.TraceConfig").unwrap();
        assert_eq!(tc.name(), "TraceConfig");
        assert!(std::ptr::eq(tc, message("TraceConfig").unwrap()));
        assert!(std::ptr::eq(
            tc,
            message(".perfetto.protos.TraceConfig").unwrap()
        ));
        let buffers = tc.field_by_name("buffers").unwrap();
        assert_eq!(buffers.number(), 1);
        assert_eq!(buffers.label(), Label::Repeated);
        assert_eq!(buffers.field_type(), FieldType::Message);
        assert_eq!(
            buffers.message_type().unwrap().name(),
            "TraceConfig.BufferConfig"
        );
        let dur = tc.field_by_number(3).unwrap();
        assert_eq!(
            (dur.name(), dur.field_type()),
            ("duration_ms", FieldType::Uint32)
        );
        assert!(tc.field_by_name("no_such_field").is_none());
        assert!(tc.field_by_number(99999).is_none());
        assert!(message("perfetto.protos.NoSuchMessage").is_none());
        assert!(message("other.TraceConfig").is_none());
    }

    #[test]
    fn enums_resolve_through_nested_scopes() {
        let buf = message("TraceConfig.BufferConfig").unwrap();
        let fp = buf.field_by_name("fill_policy").unwrap();
        let en = fp.enum_type().unwrap();
        assert_eq!(en.name(), "TraceConfig.BufferConfig.FillPolicy");
        assert_eq!(en.value_by_name("RING_BUFFER"), Some(1));
        assert_eq!(en.value_by_name("DISCARD"), Some(2));
        assert_eq!(en.value_by_name("discard"), None);
        assert_eq!(en.value_by_number(2).unwrap().name(), "DISCARD");
        let counters = enum_type("perfetto.protos.MeminfoCounters").unwrap();
        assert_eq!(counters.value_by_name("MEMINFO_MEM_TOTAL"), Some(1));
    }

    #[test]
    fn packed_and_oneof_flags() {
        let ws = message("TraceStats.WriterStats").unwrap();
        let counts = ws.field_by_name("chunk_payload_histogram_counts").unwrap();
        assert!(counts.is_packed() && counts.is_repeated());
        assert!(!ws.field_by_name("sequence_id").unwrap().is_packed());
        let rule = message("FtraceConfig.PrintFilter.Rule").unwrap();
        let prefix = rule.field_by_name("prefix").unwrap();
        assert_eq!(prefix.oneof_index(), Some(1));
        let atrace = rule.field_by_name("atrace_msg").unwrap();
        assert_eq!(atrace.oneof_index(), Some(1));
        assert_eq!(
            atrace.message_type().unwrap().name(),
            "FtraceConfig.PrintFilter.Rule.AtraceMessage"
        );
        assert_eq!(rule.field_by_name("allow").unwrap().oneof_index(), None);
    }

    #[test]
    fn only_reachable_messages_are_included() {
        // Reached from TraceConfig and the IPC services...
        assert!(message("DataSourceConfig").is_some());
        assert!(message("CommitDataRequest.ChunksToMove").is_some());
        assert!(message("TracingServiceState").is_some());
        // ...but trace-side schemas stay out of the binary.
        assert!(message("TracePacket").is_none());
        assert!(message("FtraceEvent").is_none());
    }

    #[test]
    fn tables_are_sorted_and_consistent() {
        for w in messages().windows(2) {
            assert!(w[0].name() < w[1].name());
        }
        for w in enums().windows(2) {
            assert!(w[0].name() < w[1].name());
        }
        for m in messages() {
            for w in m.fields().windows(2) {
                assert!(w[0].number() < w[1].number(), "{}", m.name());
            }
            for f in m.fields() {
                assert!(f.number() >= 1, "{}.{}", m.name(), f.name());
                let typed = f.message_type().is_some() || f.enum_type().is_some();
                let needs = matches!(f.field_type(), FieldType::Message | FieldType::Enum);
                assert_eq!(typed, needs, "{}.{}", m.name(), f.name());
            }
        }
        assert!(messages().len() > 100 && enums().len() > 20);
    }

    #[test]
    fn descriptors_stay_compact() {
        use std::mem::size_of;
        assert_eq!(size_of::<FieldDesc>(), 10);
        assert_eq!(size_of::<EnumValueDesc>(), 8);
        assert_eq!(size_of::<MessageDesc>(), 8);
    }

    #[test]
    fn ipc_messages_present() {
        let r = message("GetAsyncCommandResponse").unwrap();
        let setup = r.field_by_name("setup_tracing").unwrap();
        assert_eq!(setup.number(), 3);
        assert_eq!(
            setup.message_type().unwrap().name(),
            "GetAsyncCommandResponse.SetupTracing"
        );
        assert_eq!(
            message("IPCFrame")
                .unwrap()
                .field_by_number(8)
                .unwrap()
                .name(),
            "set_peer_identity"
        );
    }
}

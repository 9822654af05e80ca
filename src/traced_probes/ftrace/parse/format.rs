//! Parsers for tracefs format descriptions: `events/<group>/<name>/format`,
//! `events/header_page` and `events/header_event`.
//!
//! Pure: text in, structs out. Odd input gives a [`FormatError`], never a
//! panic.

use std::fmt;

/// How a field's bytes are to be read, inferred from its C declaration,
/// size and signedness the way traced_probes does it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Int8,
    Int16,
    Int32,
    Int64,
    Bool,
    /// `char name[N]`: NUL-padded string of the field's size.
    FixedCString,
    /// `char name` with size 0: NUL-terminated string to the record's end.
    CString,
    /// `__data_loc char[] name`: u32, low 16 bits offset, high 16 length.
    DataLocString,
    /// `__data_loc u8[] name`: as above, raw bytes.
    DataLocBytes,
    /// `const char *` / `char[]`: kernel address of a constant string
    /// (resolved through `printk_formats`).
    StringPtr,
    /// `void *` of 4 or 8 bytes: kernel code address.
    SymAddr32,
    SymAddr64,
    Inode32,
    Inode64,
    /// Kernel `dev_t` encoding; needs conversion to userspace encoding.
    DevId32,
    DevId64,
    Pid32,
    CommonPid32,
}

impl FieldType {
    /// Infers the type; `None` when nothing fits (the field is then unusable
    /// but the event as a whole is fine).
    pub fn infer(type_and_name: &str, size: u16, signed: bool) -> Option<FieldType> {
        let tn = type_and_name;
        if is_fixed_char_array(tn) {
            return Some(FieldType::FixedCString);
        }
        if tn.contains("__data_loc ") {
            if size != 4 {
                return None;
            }
            let bytes = [
                "__data_loc u8[] ",
                "__data_loc __u8[] ",
                "__data_loc unsigned char[] ",
            ];
            return Some(if bytes.iter().any(|b| tn.contains(b)) {
                FieldType::DataLocBytes
            } else {
                FieldType::DataLocString
            });
        }
        if tn == "unsigned long args[6]" {
            match size {
                24 => return Some(FieldType::Uint32),
                48 => return Some(FieldType::Uint64),
                _ => {}
            }
        }
        if tn.contains("char[] ") || tn.contains("char * ") {
            return Some(FieldType::StringPtr);
        }
        if tn.starts_with("void*") || tn.starts_with("void *") {
            match size {
                4 => return Some(FieldType::SymAddr32),
                8 => return Some(FieldType::SymAddr64),
                _ => {}
            }
        }
        if tn.starts_with("char ") && size == 0 {
            return Some(FieldType::CString);
        }
        if tn.starts_with("bool ") {
            return Some(FieldType::Bool);
        }
        if tn.starts_with("ino_t ") || tn.starts_with("i_ino ") {
            match size {
                4 => return Some(FieldType::Inode32),
                8 => return Some(FieldType::Inode64),
                _ => {}
            }
        }
        if tn.starts_with("dev_t ") {
            match size {
                4 => return Some(FieldType::DevId32),
                8 => return Some(FieldType::DevId64),
                _ => {}
            }
        }
        if tn.starts_with("pid_t ") && size == 4 {
            return Some(FieldType::Pid32);
        }
        if tn.contains("common_pid") && size == 4 {
            return Some(FieldType::CommonPid32);
        }
        Some(match (size, signed) {
            (1, true) => FieldType::Int8,
            (1, false) => FieldType::Uint8,
            (2, true) => FieldType::Int16,
            (2, false) => FieldType::Uint16,
            (4, true) => FieldType::Int32,
            (4, false) => FieldType::Uint32,
            (8, true) => FieldType::Int64,
            (8, false) => FieldType::Uint64,
            _ => return None,
        })
    }
}

/// `char <ident>[<alnum_>+]` exactly.
fn is_fixed_char_array(tn: &str) -> bool {
    let Some(rest) = tn.strip_prefix("char ") else {
        return false;
    };
    let Some((ident, tail)) = rest.split_once('[') else {
        return false;
    };
    let Some(dim) = tail.strip_suffix(']') else {
        return false;
    };
    let ident_ok = ident
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && ident.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let dim_ok = !dim.is_empty() && dim.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    ident_ok && dim_ok
}

/// One `field:` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The declaration as written, e.g. `char prev_comm[16]`.
    pub type_and_name: String,
    /// The C identifier, e.g. `prev_comm`.
    pub name: String,
    pub offset: u16,
    pub size: u16,
    pub signed: bool,
    /// `None`: no supported interpretation (e.g. `nid_t nid[3]`).
    pub ty: Option<FieldType>,
}

/// A parsed `events/<group>/<name>/format`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFormat {
    pub name: String,
    pub id: u32,
    /// Fields whose names start with `common_`.
    pub common_fields: Vec<Field>,
    pub fields: Vec<Field>,
    pub print_fmt: Option<String>,
}

impl EventFormat {
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields
            .iter()
            .chain(&self.common_fields)
            .find(|f| f.name == name)
    }

    /// Bytes from event start to the end of the last fixed-size field.
    pub fn fixed_size(&self) -> usize {
        self.fields
            .iter()
            .chain(&self.common_fields)
            .map(|f| f.offset as usize + f.size as usize)
            .max()
            .unwrap_or(0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatError {
    MissingName,
    MissingId,
    BadId(String),
    /// A `field:` line that does not have offset/size/signed.
    BadField {
        line: usize,
        text: String,
    },
    NoFields,
    /// `header_page` lacks the timestamp/commit/data fields or they are odd.
    BadHeaderPage(String),
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatError::MissingName => write!(f, "format has no `name:` line"),
            FormatError::MissingId => write!(f, "format has no `ID:` line"),
            FormatError::BadId(s) => write!(f, "bad event ID {s:?}"),
            FormatError::BadField { line, text } => write!(f, "line {line}: bad field {text:?}"),
            FormatError::NoFields => write!(f, "format has no fields"),
            FormatError::BadHeaderPage(s) => write!(f, "bad header_page: {s}"),
        }
    }
}

impl std::error::Error for FormatError {}

/// The identifier of a declaration: last C identifier before an optional
/// `[...]` suffix (`char comm[16]` → `comm`, `unsigned long args[6]` → `args`).
pub fn field_name(type_and_name: &str) -> Option<&str> {
    let s = type_and_name.trim_end();
    let s = match (s.ends_with(']'), s.rfind('[')) {
        (true, Some(i)) => s[..i].trim_end(),
        _ => s,
    };
    let start = s
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_ascii_alphanumeric() || *c == '_')
        .last()
        .map(|(i, _)| i)?;
    let ident = &s[start..];
    if ident.chars().next()?.is_ascii_digit() {
        return None;
    }
    Some(ident)
}

/// Parses one `field:...;\toffset:N;\tsize:N;\tsigned:N;` line (the leading
/// `field:` already matched). Separators may be tabs or spaces.
fn parse_field_line(line: &str) -> Option<Field> {
    let mut type_and_name = None;
    let (mut offset, mut size, mut signed) = (None, None, None);
    for part in line.split(';') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (key, value) = part.split_once(':')?;
        let value = value.trim();
        match key.trim() {
            "field" => type_and_name = Some(value.to_string()),
            "offset" => offset = Some(value.parse::<u16>().ok()?),
            "size" => size = Some(value.parse::<u16>().ok()?),
            "signed" => {
                signed = Some(match value {
                    "0" => false,
                    "1" => true,
                    _ => return None,
                })
            }
            _ => {}
        }
    }
    let type_and_name = type_and_name?;
    let name = field_name(&type_and_name)?.to_string();
    let (offset, size) = (offset?, size?);
    // Old kernels omit `signed:`.
    let signed = signed.unwrap_or(false);
    let ty = FieldType::infer(&type_and_name, size, signed);
    Some(Field {
        type_and_name,
        name,
        offset,
        size,
        signed,
        ty,
    })
}

/// Parses an event format file.
pub fn parse_format(text: &str) -> Result<EventFormat, FormatError> {
    let mut name = None;
    let mut id = None;
    let mut common_fields = Vec::new();
    let mut fields = Vec::new();
    let mut print_fmt = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if let Some(rest) = line.strip_prefix("name:") {
            name = Some(rest.trim().to_string());
        } else if let Some(rest) = line.strip_prefix("ID:") {
            let rest = rest.trim();
            id = Some(
                rest.parse::<u32>()
                    .map_err(|_| FormatError::BadId(rest.to_string()))?,
            );
        } else if line.starts_with("field:") {
            let field = parse_field_line(line).ok_or_else(|| FormatError::BadField {
                line: i + 1,
                text: raw.to_string(),
            })?;
            if field.name.starts_with("common_") {
                common_fields.push(field);
            } else {
                fields.push(field);
            }
        } else if let Some(rest) = line.strip_prefix("print fmt:") {
            print_fmt = Some(rest.trim().to_string());
            break;
        }
    }
    let name = name
        .filter(|n| !n.is_empty())
        .ok_or(FormatError::MissingName)?;
    let id = id.ok_or(FormatError::MissingId)?;
    if common_fields.is_empty() && fields.is_empty() {
        return Err(FormatError::NoFields);
    }
    Ok(EventFormat {
        name,
        id,
        common_fields,
        fields,
        print_fmt,
    })
}

/// Layout of a ring-buffer page header (`events/header_page`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageHeaderLayout {
    pub timestamp_offset: u16,
    pub commit_offset: u16,
    /// 4 on 32-bit kernels, 8 on 64-bit ones.
    pub commit_size: u8,
    /// Where event data starts (the `data` field's offset).
    pub data_offset: u16,
    /// Total page size: data offset + data size.
    pub page_size: usize,
}

impl PageHeaderLayout {
    /// What 64-bit kernels with 4 KiB pages use; the fallback when
    /// `header_page` cannot be read.
    pub const DEFAULT_64: PageHeaderLayout = PageHeaderLayout {
        timestamp_offset: 0,
        commit_offset: 8,
        commit_size: 8,
        data_offset: 16,
        page_size: 4096,
    };

    /// Fallback for 32-bit kernels.
    pub const DEFAULT_32: PageHeaderLayout = PageHeaderLayout {
        timestamp_offset: 0,
        commit_offset: 8,
        commit_size: 4,
        data_offset: 12,
        page_size: 4096,
    };
}

/// Parses `events/header_page`.
pub fn parse_header_page(text: &str) -> Result<PageHeaderLayout, FormatError> {
    let bad = |s: &str| FormatError::BadHeaderPage(s.to_string());
    let mut ts = None;
    let mut commit = None;
    let mut data = None;
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("field:"))
    {
        let Some(f) = parse_field_line(line) else {
            return Err(bad(line));
        };
        match f.name.as_str() {
            "timestamp" => ts = Some(f),
            "commit" => commit = Some(f),
            "data" => data = Some(f),
            _ => {}
        }
    }
    let ts = ts.ok_or_else(|| bad("no timestamp field"))?;
    let commit = commit.ok_or_else(|| bad("no commit field"))?;
    let data = data.ok_or_else(|| bad("no data field"))?;
    if ts.size != 8 {
        return Err(bad("timestamp is not 8 bytes"));
    }
    if commit.size != 4 && commit.size != 8 {
        return Err(bad("commit is neither 4 nor 8 bytes"));
    }
    if (data.offset as usize) < commit.offset as usize + commit.size as usize
        || (data.offset as usize) < ts.offset as usize + 8
    {
        return Err(bad("data overlaps the header"));
    }
    let page_size = data.offset as usize + data.size as usize;
    if page_size <= data.offset as usize {
        return Err(bad("empty data area"));
    }
    Ok(PageHeaderLayout {
        timestamp_offset: ts.offset,
        commit_offset: commit.offset,
        commit_size: commit.size as u8,
        data_offset: data.offset,
        page_size,
    })
}

/// What `events/header_event` tells: whether the kernel may emit absolute
/// timestamp records (type_len 31, 4.17+). The parser accepts them either
/// way; this is informational.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeaderEventInfo {
    pub has_time_stamp: bool,
    pub data_max_type_len: u8,
}

pub fn parse_header_event(text: &str) -> HeaderEventInfo {
    let mut info = HeaderEventInfo {
        has_time_stamp: false,
        data_max_type_len: 28,
    };
    for line in text.lines().map(str::trim) {
        if line.starts_with("time_stamp") && line.ends_with("== 31") {
            info.has_time_stamp = true;
        }
        if let Some(rest) = line.strip_prefix("data max type_len") {
            if let Some(n) = rest
                .trim()
                .strip_prefix("==")
                .and_then(|n| n.trim().parse().ok())
            {
                info.data_max_type_len = n;
            }
        }
    }
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHED_SWITCH_3_4: &str = "name: sched_switch\nID: 70\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\tfield:int common_padding;\toffset:8;\tsize:4;\tsigned:1;\n\n\
\tfield:char prev_comm[16];\toffset:12;\tsize:16;\tsigned:0;\n\
\tfield:pid_t prev_pid;\toffset:28;\tsize:4;\tsigned:1;\n\
\tfield:long prev_state;\toffset:36;\tsize:4;\tsigned:1;\n\n\
print fmt: \"prev_comm=%s\", REC->prev_comm\n";

    #[test]
    fn parses_event() {
        let f = parse_format(SCHED_SWITCH_3_4).unwrap();
        assert_eq!((f.name.as_str(), f.id), ("sched_switch", 70));
        assert_eq!(f.common_fields.len(), 3);
        assert_eq!(f.common_fields[1].ty, Some(FieldType::CommonPid32));
        let names: Vec<_> = f.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["prev_comm", "prev_pid", "prev_state"]);
        let c = f.field("prev_comm").unwrap();
        assert_eq!(
            (c.offset, c.size, c.signed, c.ty),
            (12, 16, false, Some(FieldType::FixedCString))
        );
        assert_eq!(f.field("prev_pid").unwrap().ty, Some(FieldType::Pid32));
        assert_eq!(f.field("prev_state").unwrap().ty, Some(FieldType::Int32));
        assert_eq!(
            f.print_fmt.as_deref(),
            Some("\"prev_comm=%s\", REC->prev_comm")
        );
        assert_eq!(f.fixed_size(), 40);
    }

    #[test]
    fn names_and_types() {
        assert_eq!(field_name("char comm[TASK_COMM_LEN]"), Some("comm"));
        assert_eq!(field_name("__data_loc char[] name"), Some("name"));
        assert_eq!(field_name("const char * str"), Some("str"));
        assert_eq!(field_name("unsigned long args[6]"), Some("args"));
        assert_eq!(field_name("[3]"), None);
        let t = FieldType::infer;
        assert_eq!(
            t("__data_loc char[] name", 4, false),
            Some(FieldType::DataLocString)
        );
        assert_eq!(
            t("__data_loc u8[] buf", 4, false),
            Some(FieldType::DataLocBytes)
        );
        assert_eq!(t("__data_loc char[] name", 8, false), None);
        assert_eq!(
            t("unsigned long args[6]", 48, false),
            Some(FieldType::Uint64)
        );
        assert_eq!(
            t("unsigned long args[6]", 24, false),
            Some(FieldType::Uint32)
        );
        assert_eq!(t("const char * fmt", 8, false), Some(FieldType::StringPtr));
        assert_eq!(t("void * func", 8, false), Some(FieldType::SymAddr64));
        assert_eq!(t("char buf", 0, false), Some(FieldType::CString));
        assert_eq!(t("bool ok", 1, false), Some(FieldType::Bool));
        assert_eq!(t("ino_t ino", 8, false), Some(FieldType::Inode64));
        assert_eq!(t("dev_t dev", 4, false), Some(FieldType::DevId32));
        assert_eq!(t("nid_t nid[3]", 12, false), None);
        assert_eq!(t("s16 x", 2, true), Some(FieldType::Int16));
    }

    #[test]
    fn odd_input_is_an_error() {
        assert_eq!(parse_format(""), Err(FormatError::MissingName));
        assert_eq!(parse_format("name: x\n"), Err(FormatError::MissingId));
        assert!(matches!(
            parse_format("name: x\nID: -1\n"),
            Err(FormatError::BadId(_))
        ));
        assert_eq!(
            parse_format("name: x\nID: 3\nformat:\n"),
            Err(FormatError::NoFields)
        );
        let bad = "name: x\nID: 3\n\tfield:int a;\toffset:99999;\tsize:4;\tsigned:1;\n";
        assert!(matches!(
            parse_format(bad),
            Err(FormatError::BadField { line: 3, .. })
        ));
        let bad = "name: x\nID: 3\n\tfield:int a;\tsize:4;\n";
        assert!(matches!(
            parse_format(bad),
            Err(FormatError::BadField { .. })
        ));
    }

    #[test]
    fn header_page_layouts() {
        let h64 = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\
                   \tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n\
                   \tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n\
                   \tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;\n";
        assert_eq!(
            parse_header_page(h64).unwrap(),
            PageHeaderLayout::DEFAULT_64
        );
        let h32 = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\
                   \tfield: local_t commit;\toffset:8;\tsize:4;\tsigned:1;\n\
                   \tfield: char data;\toffset:12;\tsize:16372;\tsigned:1;\n";
        let l = parse_header_page(h32).unwrap();
        assert_eq!((l.commit_size, l.data_offset, l.page_size), (4, 12, 16384));
        assert!(parse_header_page("").is_err());
        let overlap = h64.replace("offset:16;", "offset:10;");
        assert!(parse_header_page(&overlap).is_err());
    }

    #[test]
    fn header_event_info() {
        let i = parse_header_event("\ttime_stamp : type == 31\n\tdata max type_len  == 28\n");
        assert!(i.has_time_stamp);
        assert_eq!(i.data_max_type_len, 28);
        assert!(!parse_header_event("padding : type == 29").has_time_stamp);
    }
}

//! The one protobuf reader for untrusted bytes: walks fields in place,
//! never allocates, and stops at the first malformed field instead of
//! panicking. Used by the service (configs it forwards verbatim), the IPC
//! schema check, the client's trace walks and the trace reader of
//! `tracebox report`.

/// Decodes a whole (not length-prefixed) message with quick-protobuf.
pub fn decode_message<'a, M: quick_protobuf::MessageRead<'a>>(
    bytes: &'a [u8],
) -> quick_protobuf::Result<M> {
    M::from_reader(&mut quick_protobuf::BytesReader::from_bytes(bytes), bytes)
}

/// One top-level field: number, wire type and its bytes (`value` is the
/// payload for length-delimited fields, the encoded value otherwise);
/// `whole` covers tag + value.
#[derive(Debug, Clone, Copy)]
pub struct RawField<'a> {
    pub number: u32,
    pub wire_type: u8,
    pub value: &'a [u8],
    pub whole: &'a [u8],
}

/// Reads a varint; `None` if truncated or longer than 10 bytes.
pub fn read_varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    for (i, byte) in b.iter().enumerate().take(10) {
        v |= ((byte & 0x7f) as u64) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// Why a message did not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// A varint is truncated or longer than 10 bytes.
    BadVarint,
    /// A field runs past the end of its message.
    Overrun,
    /// Wire type 3, 4, 6 or 7 (groups and unassigned types).
    BadWireType(u8),
    /// Field number 0 or above 2^32.
    BadFieldNumber,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::BadVarint => f.write_str("malformed varint"),
            DecodeError::Overrun => f.write_str("field runs past the end of its message"),
            DecodeError::BadWireType(t) => write!(f, "unsupported wire type {t}"),
            DecodeError::BadFieldNumber => f.write_str("field number 0"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Iterates the top-level fields of a message. Stops (with `error` set and
/// the reason in [`FieldIter::error_kind`]) at the first malformed field;
/// groups are treated as malformed.
pub struct FieldIter<'a> {
    rest: &'a [u8],
    pub error: bool,
    kind: Option<DecodeError>,
}

impl<'a> FieldIter<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        FieldIter {
            rest: bytes,
            error: false,
            kind: None,
        }
    }

    /// Why the walk stopped early, if it did.
    pub fn error_kind(&self) -> Option<DecodeError> {
        self.kind
    }

    fn parse_one(&self) -> Result<(RawField<'a>, usize), DecodeError> {
        let b = self.rest;
        let h = field_header(b, 0, b.len() as u64)?;
        let number = u32::try_from(h.number).map_err(|_| DecodeError::BadFieldNumber)?;
        let (start, end) = (h.value_start as usize, h.end as usize);
        Ok((
            RawField {
                number,
                wire_type: h.wire_type,
                value: &b[start..end],
                whole: &b[..end],
            },
            end,
        ))
    }
}

/// A field's header, with positions in the enclosing bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldHeader {
    pub number: u64,
    pub wire_type: u8,
    /// The value of a varint field (0 for the other wire types).
    pub value: u64,
    /// Where the value (or a length-delimited payload) starts.
    pub value_start: u64,
    /// Where the field ends.
    pub end: u64,
}

/// Longest field header: a 10-byte tag and a 10-byte varint or length.
pub const MAX_FIELD_HEADER: usize = 20;

/// Parses the header of the field whose first bytes are `head_untrusted`
/// (at least [`MAX_FIELD_HEADER`] bytes unless the data ends sooner) and
/// which starts at `pos`; the field must end by `limit`. Both [`FieldIter`]
/// and readers that walk a file through a window use it, so there is one
/// parser of field headers.
pub fn field_header(
    head_untrusted: &[u8],
    pos: u64,
    limit: u64,
) -> Result<FieldHeader, DecodeError> {
    use DecodeError::*;
    let b = head_untrusted;
    let (tag, n) = read_varint(b).ok_or(BadVarint)?;
    let number = tag >> 3;
    if number == 0 || number > u64::from(u32::MAX) {
        return Err(BadFieldNumber);
    }
    let wire_type = (tag & 7) as u8;
    // (varint value, bytes between the tag and the value, value bytes)
    let (value, prefix, len) = match wire_type {
        0 => {
            let (v, m) = read_varint(&b[n..]).ok_or(BadVarint)?;
            (v, 0, m as u64)
        }
        1 => (0, 0, 8),
        5 => (0, 0, 4),
        2 => {
            let (l, m) = read_varint(&b[n..]).ok_or(BadVarint)?;
            (0, m as u64, l)
        }
        t => return Err(BadWireType(t)),
    };
    let value_start = pos + n as u64 + prefix;
    let end = value_start.checked_add(len).ok_or(Overrun)?;
    if end > limit {
        return Err(Overrun);
    }
    Ok(FieldHeader {
        number,
        wire_type,
        value,
        value_start,
        end,
    })
}

impl<'a> Iterator for FieldIter<'a> {
    type Item = RawField<'a>;

    fn next(&mut self) -> Option<RawField<'a>> {
        if self.rest.is_empty() || self.error {
            return None;
        }
        match self.parse_one() {
            Ok((f, used)) => {
                self.rest = &self.rest[used..];
                Some(f)
            }
            Err(e) => {
                self.error = true;
                self.kind = Some(e);
                None
            }
        }
    }
}

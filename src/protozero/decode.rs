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
        use DecodeError::*;
        let b = self.rest;
        let (tag, n) = read_varint(b).ok_or(BadVarint)?;
        let number = u32::try_from(tag >> 3)
            .ok()
            .filter(|&n| n != 0)
            .ok_or(BadFieldNumber)?;
        let wire_type = (tag & 7) as u8;
        let (start, end) = match wire_type {
            0 => {
                let (_, m) = read_varint(&b[n..]).ok_or(BadVarint)?;
                (n, n + m)
            }
            1 => (n, n + 8),
            5 => (n, n + 4),
            2 => {
                let (len_untrusted, m) = read_varint(&b[n..]).ok_or(BadVarint)?;
                let len = usize::try_from(len_untrusted).map_err(|_| Overrun)?;
                (n + m, (n + m).checked_add(len).ok_or(Overrun)?)
            }
            t => return Err(BadWireType(t)),
        };
        if end > b.len() {
            return Err(Overrun);
        }
        Ok((
            RawField {
                number,
                wire_type,
                value: &b[start..end],
                whole: &b[..end],
            },
            end,
        ))
    }
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

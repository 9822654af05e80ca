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

/// Iterates the top-level fields of a message. Stops (with `error` set) at
/// the first malformed field; groups are treated as malformed.
pub struct FieldIter<'a> {
    rest: &'a [u8],
    pub error: bool,
}

impl<'a> FieldIter<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        FieldIter {
            rest: bytes,
            error: false,
        }
    }

    fn parse_one(&self) -> Option<(RawField<'a>, usize)> {
        let b = self.rest;
        let (tag, n) = read_varint(b)?;
        let number = u32::try_from(tag >> 3).ok().filter(|&n| n != 0)?;
        let wire_type = (tag & 7) as u8;
        let (start, end) = match wire_type {
            0 => {
                let (_, m) = read_varint(&b[n..])?;
                (n, n + m)
            }
            1 => (n, n + 8),
            5 => (n, n + 4),
            2 => {
                let (len, m) = read_varint(&b[n..])?;
                let len = usize::try_from(len).ok()?;
                (n + m, (n + m).checked_add(len)?)
            }
            _ => return None,
        };
        if end > b.len() {
            return None;
        }
        Some((
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
            Some((f, used)) => {
                self.rest = &self.rest[used..];
                Some(f)
            }
            None => {
                self.error = true;
                None
            }
        }
    }
}

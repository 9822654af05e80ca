//! Minimal protobuf wire reader for checking trace files. Malformed input
//! yields an error item and ends iteration; it never panics.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

impl Value<'_> {
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Varint(v) | Value::Fixed64(v) => Some(v),
            Value::Fixed32(v) => Some(v.into()),
            Value::Bytes(_) => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    pub offset: usize,
    pub what: &'static str,
}

pub struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
    failed: bool,
}

pub fn fields(buf: &[u8]) -> Fields<'_> {
    Fields {
        buf,
        pos: 0,
        failed: false,
    }
}

fn read_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

impl<'a> Fields<'a> {
    /// Offset just past the last field returned.
    pub fn position(&self) -> usize {
        self.pos
    }

    fn fail(&mut self, what: &'static str) -> Option<Result<(u32, Value<'a>), DecodeError>> {
        self.failed = true;
        Some(Err(DecodeError {
            offset: self.pos,
            what,
        }))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Value<'a>), DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let Some(tag) = read_varint(self.buf, &mut self.pos) else {
            return self.fail("truncated tag");
        };
        let field = match u32::try_from(tag >> 3) {
            Ok(f) if f > 0 => f,
            _ => return self.fail("bad field number"),
        };
        let value = match tag & 7 {
            0 => match read_varint(self.buf, &mut self.pos) {
                Some(v) => Value::Varint(v),
                None => return self.fail("truncated varint"),
            },
            1 => match self.buf.get(self.pos..self.pos + 8) {
                Some(b) => {
                    self.pos += 8;
                    Value::Fixed64(u64::from_le_bytes(b.try_into().unwrap_or_default()))
                }
                None => return self.fail("truncated fixed64"),
            },
            2 => {
                let Some(len_untrusted) = read_varint(self.buf, &mut self.pos) else {
                    return self.fail("truncated length");
                };
                let end = usize::try_from(len_untrusted)
                    .ok()
                    .and_then(|l| self.pos.checked_add(l))
                    .filter(|&e| e <= self.buf.len());
                let Some(end) = end else {
                    return self.fail("length past end");
                };
                let b = &self.buf[self.pos..end];
                self.pos = end;
                Value::Bytes(b)
            }
            5 => match self.buf.get(self.pos..self.pos + 4) {
                Some(b) => {
                    self.pos += 4;
                    Value::Fixed32(u32::from_le_bytes(b.try_into().unwrap_or_default()))
                }
                None => return self.fail("truncated fixed32"),
            },
            _ => return self.fail("unsupported wire type"),
        };
        Some(Ok((field, value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_all_wire_types() {
        // 1: varint 300, 2: bytes "hi", 3: fixed32 7, 4: fixed64 9
        let buf = [
            0x08, 0xac, 0x02, 0x12, 0x02, b'h', b'i', 0x1d, 7, 0, 0, 0, 0x21, 9, 0, 0, 0, 0, 0, 0,
            0,
        ];
        let got: Vec<_> = fields(&buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            got,
            vec![
                (1, Value::Varint(300)),
                (2, Value::Bytes(b"hi")),
                (3, Value::Fixed32(7)),
                (4, Value::Fixed64(9)),
            ]
        );
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        for bad in [&[0x12, 0x05, b'x'][..], &[0x08, 0xff], &[0x0b], &[0x00]] {
            let items: Vec<_> = fields(bad).collect();
            assert!(items.last().unwrap().is_err(), "{bad:?}");
        }
        // 10 continuation bytes: varint too long.
        let long = [
            0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ];
        assert!(fields(&long).any(|r| r.is_err()));
    }
}

//! Turns ReadBuffers slices into a trace file: each packet is written as
//! field 1 of `perfetto.protos.Trace` (tag 0x0A, varint size, bytes).

use std::io::{self, Write};

use crate::protozero::encode_varint;

/// Reassembles packets from slices and appends them to `out`.
#[derive(Debug)]
pub struct PacketWriter<W: Write> {
    out: W,
    pending: Vec<Vec<u8>>,
    pending_len: usize,
    pub bytes_written: u64,
    pub packets_written: u64,
}

impl<W: Write> PacketWriter<W> {
    pub fn new(out: W) -> Self {
        Self {
            out,
            pending: Vec::new(),
            pending_len: 0,
            bytes_written: 0,
            packets_written: 0,
        }
    }

    /// Adds one slice; `last` closes the packet and writes it.
    pub fn push_slice(&mut self, data: Vec<u8>, last: bool) -> io::Result<()> {
        self.pending_len += data.len();
        self.pending.push(data);
        if last {
            let mut header = [0u8; 11];
            header[0] = 0x0A;
            let mut varint = [0u8; 10];
            let n = encode_varint(self.pending_len as u64, &mut varint);
            header[1..1 + n].copy_from_slice(&varint[..n]);
            self.out.write_all(&header[..1 + n])?;
            for s in self.pending.drain(..) {
                self.out.write_all(&s)?;
            }
            self.bytes_written += (1 + n + self.pending_len) as u64;
            self.packets_written += 1;
            self.pending_len = 0;
        }
        Ok(())
    }

    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_are_framed_as_trace_field_one() {
        let mut w = PacketWriter::new(Vec::new());
        w.push_slice(b"ab".to_vec(), false).unwrap();
        w.push_slice(b"c".to_vec(), true).unwrap();
        w.push_slice(vec![7; 200], true).unwrap();
        assert_eq!(w.packets_written, 2);
        let out = w.finish().unwrap();
        assert_eq!(&out[..5], &[0x0A, 3, b'a', b'b', b'c']);
        assert_eq!(&out[5..8], &[0x0A, 0xC8, 0x01]);
        assert_eq!(out.len(), 5 + 3 + 200);
    }
}

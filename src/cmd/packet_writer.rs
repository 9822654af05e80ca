//! Turns ReadBuffers packets into a trace file: each packet is written as
//! field 1 of `perfetto.protos.Trace` (tag 0x0A, varint size, bytes).

use std::io::{self, Write};

use crate::protozero::encode_varint;

/// Appends packets, each given as the slices it arrived in, to `out`.
#[derive(Debug)]
pub struct PacketWriter<W: Write> {
    out: W,
    pub bytes_written: u64,
    pub packets_written: u64,
}

impl<W: Write> PacketWriter<W> {
    pub fn new(out: W) -> Self {
        Self {
            out,
            bytes_written: 0,
            packets_written: 0,
        }
    }

    /// Writes one packet made of `parts`.
    pub fn write_packet(&mut self, parts: &[Vec<u8>]) -> io::Result<()> {
        let len: usize = parts.iter().map(Vec::len).sum();
        let mut header = [0u8; 11];
        header[0] = 0x0A;
        let mut varint = [0u8; 10];
        let n = encode_varint(len as u64, &mut varint);
        header[1..1 + n].copy_from_slice(&varint[..n]);
        self.out.write_all(&header[..1 + n])?;
        for p in parts {
            self.out.write_all(p)?;
        }
        self.bytes_written += (1 + n + len) as u64;
        self.packets_written += 1;
        Ok(())
    }

    /// What the packets went into so far.
    pub fn out_mut(&mut self) -> &mut W {
        &mut self.out
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
        w.write_packet(&[b"ab".to_vec(), b"c".to_vec()]).unwrap();
        w.write_packet(&[vec![7; 200]]).unwrap();
        assert_eq!(w.packets_written, 2);
        let out = w.finish().unwrap();
        assert_eq!(&out[..5], &[0x0A, 3, b'a', b'b', b'c']);
        assert_eq!(&out[5..8], &[0x0A, 0xC8, 0x01]);
        assert_eq!(out.len(), 5 + 3 + 200);
    }
}

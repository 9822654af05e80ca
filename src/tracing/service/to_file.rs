//! The write_into_file sink of a read pass: packets framed as
//! `Trace.packet` fields, either copied into one `Vec` for an
//! [`Output::WriteToFile`](super::types::Output::WriteToFile), or
//! *gathered*: each buffer's packets written through the adapter's
//! [`FileOutput`] as a list of parts, the packets' fragments straight from
//! the buffer's bytes and only the framing (field headers, trailers, small
//! fragments) copied.

use crate::protozero::encode_varint;

use super::read_pass::PacketSink;
use super::rotate_divert::{Divert, Route};
use super::trace_buffer::TracePacket;
use super::types::{FileOutput, SessionId};

/// Fragments shorter than this are copied next to the framing: an iovec
/// costs the kernel about as much as copying this many bytes, and it keeps
/// the parts of a pass well under `IOV_MAX` per kilobyte-sized fragment.
pub(super) const COPY_BELOW: usize = 256;

/// Where the next bytes of the file come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// `data[start..end]`.
    Copied(usize, usize),
    /// `(start, len)` in the buffer being read.
    Buffer(usize, usize),
}

/// Gathering state: `data` holds only the copied bytes, `parts` the
/// file's order.
#[derive(Debug, Default)]
pub(super) struct Gather {
    session: SessionId,
    parts: Vec<Part>,
    /// Bytes of `data` already named in `parts`.
    copied_upto: usize,
    /// The first failed write: nothing more is written.
    pub error: Option<String>,
}

impl Gather {
    pub fn new(session: SessionId) -> Self {
        Gather {
            session,
            ..Default::default()
        }
    }

    /// Names the bytes copied into `data` since the last part.
    fn seal_copied(&mut self, data: &[u8]) {
        if data.len() > self.copied_upto {
            self.parts.push(Part::Copied(self.copied_upto, data.len()));
            self.copied_upto = data.len();
        }
    }

    /// Writes everything gathered (`buffer`: the bytes the buffer parts
    /// point into) and starts afresh with `data` emptied.
    fn write(&mut self, data: &mut Vec<u8>, buffer: &[u8], files: Option<&mut dyn FileOutput>) {
        self.seal_copied(data);
        if self.error.is_none() && !self.parts.is_empty() {
            let parts = slices(&self.parts, data, buffer);
            let done = match files {
                Some(f) => f.append(self.session, &parts),
                None => Err("Writing the trace file failed: the file is gone".into()),
            };
            self.error = done.err();
        }
        self.parts.clear();
        self.copied_upto = 0;
        data.clear();
    }
}

fn slices<'a>(parts: &[Part], data: &'a [u8], buffer: &'a [u8]) -> Vec<&'a [u8]> {
    let slice = |p: &Part| match *p {
        Part::Copied(a, b) => &data[a..b],
        Part::Buffer(a, n) => &buffer[a..a + n],
    };
    parts.iter().map(slice).collect()
}

/// `Trace`-framed packets for write_into_file, up to `max` bytes in all
/// (0 = no limit): the first packet that would cross it and every later
/// one of the pass are dropped.
pub(super) struct ToFile {
    pub data: Vec<u8>,
    pub written: u64,
    pub max: u64,
    pub crossed: bool,
    /// A rotation's old-file pass: packets for the new file go here.
    pub divert: Option<Divert>,
    /// Packets held at the last cut, written before the first buffer's.
    pub lead: Vec<u8>,
    /// Writing each buffer's packets from the buffer itself.
    pub gather: Option<Gather>,
}

impl ToFile {
    /// Counts a packet of `len` bytes against the file's limit and writes
    /// its field header; false if it is dropped.
    fn begin_field(&mut self, len: usize) -> bool {
        let mut v = [0u8; 10];
        let n = encode_varint(len as u64, &mut v);
        let framed = (1 + n + len) as u64;
        if self.crossed || (self.max > 0 && self.written + framed > self.max) {
            self.crossed = true;
            return false;
        }
        self.written += framed;
        self.data.push(0x0a);
        self.data.extend_from_slice(&v[..n]);
        true
    }

    /// Writes the packets gathered so far (those of a buffer only while
    /// its bytes are `buffer`), and whatever was copied.
    pub fn write_gathered(&mut self, buffer: &[u8], files: Option<&mut dyn FileOutput>) {
        if let Some(g) = self.gather.as_mut() {
            g.write(&mut self.data, buffer, files);
        }
    }

    fn failed(&self) -> bool {
        self.gather.as_ref().is_some_and(|g| g.error.is_some())
    }
}

impl PacketSink for ToFile {
    fn packet(&mut self, body: &TracePacket<'_>, trailer: &[u8]) -> bool {
        let len = body.size() + trailer.len();
        if let Some(d) = self.divert.as_mut() {
            let slices: Vec<&[u8]> = body.slices().collect();
            let before = self.data.len();
            let route = d.route(&slices, trailer, &mut self.data);
            self.written += (self.data.len() - before) as u64;
            if let Route::Hold(i) = route {
                let mut v = [0u8; 10];
                let n = encode_varint(len as u64, &mut v);
                let held = d.held_mut(i);
                held.push(0x0a);
                held.extend_from_slice(&v[..n]);
                slices.iter().for_each(|s| held.extend_from_slice(s));
                held.extend_from_slice(trailer);
                return true;
            }
        }
        if self.begin_field(len) {
            body.slices()
                .for_each(|s| crate::mem::skew_copy::extend_bytes(&mut self.data, s));
            self.data.extend_from_slice(trailer);
        }
        !self.failed()
    }

    fn holds_buffer_bytes(&self) -> bool {
        self.gather.is_some()
    }

    fn buffer_packet(&mut self, body: &TracePacket<'_>, trailer: &[u8]) -> bool {
        if self.divert.is_some() || self.gather.is_none() {
            return self.packet(body, trailer);
        }
        if self.begin_field(body.size() + trailer.len()) {
            let g = self.gather.as_mut().expect("checked above");
            for (s, &(start, n)) in body.slices().zip(body.ranges()) {
                if n < COPY_BELOW {
                    self.data.extend_from_slice(s);
                } else {
                    g.seal_copied(&self.data);
                    g.parts.push(Part::Buffer(start, n));
                }
            }
            self.data.extend_from_slice(trailer);
        }
        !self.failed()
    }

    fn end_buffer(&mut self, buffer: &[u8], files: Option<&mut dyn FileOutput>) {
        self.write_gathered(buffer, files);
    }

    fn divert(&mut self) -> Option<&mut Option<Divert>> {
        Some(&mut self.divert)
    }

    fn take_lead(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.lead)
    }

    fn set_buffer(&mut self, index: Option<usize>) {
        if index.is_some() && !self.lead.is_empty() {
            self.written += self.lead.len() as u64;
            self.data.append(&mut self.lead);
        }
    }
}

#[cfg(test)]
#[path = "to_file_tests.rs"]
mod tests;

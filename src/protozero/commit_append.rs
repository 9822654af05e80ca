//! Appending whole packets to a trace file so that the file parses at
//! every instant, even if the writer is SIGKILLed inside a write().
//!
//! A plain `write()` of many pages can stop at any page boundary when a
//! fatal signal arrives (the kernel checks between page-cache folios), and
//! a kill between two writes leaves whatever the first one wrote: either
//! way the file can end inside a packet. Here the file always ends with a
//! complete *padding field* (`Trace` field [`PAD_FIELD`], length-delimited,
//! which trace_processor and every protobuf reader skip), and new bytes are
//! only ever written:
//!
//! 1. inside the padding's payload, where nobody parses them;
//! 2. as whole pages at the end of the file, each page one complete padding
//!    field (a write cut at a page boundary leaves whole pages);
//! 3. as a 6-byte header rewritten in place, never straddling a page, which
//!    the kernel copies in one step.
//!
//! Appending a batch: grow the padding (2) until the batch fits, merging the
//! new pages into it (3); write the batch, less its first packet's header,
//! into the padding's payload (1) followed by the header of the padding that
//! will remain (1); then rewrite the padding's header into the first
//! packet's header (3), which makes the batch visible in one step. A
//! clean finish truncates the trailing padding away; after a crash it stays
//! and readers skip it.
//!
//! The logic here is pure: [`WriteAt`] is the file.

/// `Trace` field number of padding (unused by `Trace`, which has only
/// `packet = 1`; one byte as a tag).
pub const PAD_FIELD: u32 = 15;
const PAD_LEN_TAG: u8 = (PAD_FIELD << 3 | 2) as u8;
const PAD_VARINT_TAG: u8 = (PAD_FIELD << 3) as u8;
const PACKET_TAG: u8 = 1 << 3 | 2;
/// A tag byte and a 5-byte (non-minimal) varint length.
pub const HDR: u64 = 6;
/// The unit the kernel never splits a write inside.
pub const PAGE: u64 = 4096;
/// Bytes of padding pages written per write() when growing (the buffer
/// holding them is kept).
const GROW_STEP: usize = 64 << 10;
/// Filler between a batch and the next padding header, so that the header
/// does not straddle a page: 0 or 2..=7 bytes.
const MAX_FILL: u64 = 7;

/// Positioned writes into the file (pwrite), and nothing else.
pub trait WriteAt {
    type Error;
    fn write_all_at(&mut self, buf: &[u8], at: u64) -> Result<(), Self::Error>;
}

/// The file's shape: `committed` bytes of whole fields, then (from
/// `committed` to `eof`) at most one padding field.
#[derive(Debug)]
pub struct CommitAppender {
    committed: u64,
    eof: u64,
    /// Whether `committed..eof` is a padding field (else `eof == committed`).
    padded: bool,
    /// [`GROW_STEP`] bytes of page-sized padding fields, for growth.
    pages: Vec<u8>,
    /// Reused header and filler bytes.
    small: Vec<u8>,
}

impl CommitAppender {
    /// A file whose first `len` bytes are whole fields.
    pub fn new(len: u64) -> Self {
        Self {
            committed: len,
            eof: len,
            padded: false,
            pages: Vec::new(),
            small: Vec::with_capacity(16),
        }
    }

    /// Bytes of whole fields: where a clean finish truncates the file.
    pub fn committed(&self) -> u64 {
        self.committed
    }

    /// Appends `batch` (whole `Trace` fields). On error the file may end in
    /// bytes beyond [`Self::committed`], which the caller truncates away.
    pub fn append<F: WriteAt>(&mut self, f: &mut F, batch: &[u8]) -> Result<(), F::Error> {
        if batch.is_empty() {
            return Ok(());
        }
        let b = batch.len() as u64;
        self.grow(f, HDR + b + MAX_FILL + HDR)?;
        let pad = self.committed;
        // The padding header turns into the first packet's header; any
        // other first field keeps its own header behind a padding varint.
        let (slot, body) = match first_packet(batch) {
            Some((head, len)) => (packet_header(len), &batch[head..]),
            None => (PAD_VARINT_SLOT, batch),
        };
        f.write_all_at(body, pad + HDR)?;
        let end = pad + HDR + body.len() as u64;
        let fill = filler_before_header(end);
        let next = end + fill;
        self.small.clear();
        push_filler(&mut self.small, fill);
        push_pad_header(&mut self.small, self.eof - next - HDR);
        f.write_all_at(&self.small, end)?;
        f.write_all_at(&slot, pad)?;
        self.committed = next;
        Ok(())
    }

    /// Makes the trailing padding at least `need` bytes long.
    fn grow<F: WriteAt>(&mut self, f: &mut F, need: u64) -> Result<(), F::Error> {
        if !self.padded {
            self.align(f)?;
        }
        let have = if self.padded {
            self.eof - self.committed
        } else {
            0
        };
        if have >= need {
            return Ok(());
        }
        let n = (need.saturating_sub(have)).div_ceil(PAGE);
        self.fill_pages();
        let mut left = n * PAGE;
        while left > 0 {
            let step = left.min(self.pages.len() as u64);
            f.write_all_at(&self.pages[..step as usize], self.eof)?;
            self.eof += step;
            left -= step;
        }
        // Merge: one header over the old padding (if any) and the pages.
        self.small.clear();
        push_pad_header(&mut self.small, self.eof - self.committed - HDR);
        f.write_all_at(&self.small, self.committed)?;
        self.padded = true;
        Ok(())
    }

    /// Brings an unaligned end of file to a page boundary (only a file
    /// handed over at an odd offset needs it): with a padding field that
    /// starts the trailing padding when it can hold a header, else with a
    /// committed filler. A 1-byte gap cannot hold a field, so the filler
    /// then reaches a page further and its header straddles a page (the one
    /// write here that a kill can tear).
    fn align<F: WriteAt>(&mut self, f: &mut F) -> Result<(), F::Error> {
        let gap = (PAGE - self.eof % PAGE) % PAGE;
        if gap == 0 {
            return Ok(());
        }
        let gap = if gap == 1 { gap + PAGE } else { gap };
        self.small.clear();
        if gap < HDR {
            push_filler(&mut self.small, gap);
        } else {
            push_pad_header(&mut self.small, gap - HDR);
            self.small.resize(gap as usize, 0);
        }
        f.write_all_at(&self.small, self.eof)?;
        self.eof += gap;
        // A header across a page must not be rewritten later: that padding
        // stays as committed bytes.
        if !(HDR..=PAGE).contains(&gap) {
            self.committed = self.eof;
        } else {
            self.padded = true;
        }
        Ok(())
    }

    /// Builds [`GROW_STEP`] bytes of page-sized padding fields, once.
    fn fill_pages(&mut self) {
        if !self.pages.is_empty() {
            return;
        }
        let mut page = Vec::with_capacity(PAGE as usize);
        push_pad_header(&mut page, PAGE - HDR);
        page.resize(PAGE as usize, 0);
        while self.pages.len() < GROW_STEP {
            self.pages.extend_from_slice(&page);
        }
    }
}

/// A committed slot for a batch that does not start with a packet: a
/// padding varint of value 0.
const PAD_VARINT_SLOT: [u8; HDR as usize] = [PAD_VARINT_TAG, 0x80, 0x80, 0x80, 0x80, 0];

/// The header length and payload length of `batch`'s first field when it
/// is a packet.
fn first_packet(batch: &[u8]) -> Option<(usize, u64)> {
    if *batch.first()? != PACKET_TAG {
        return None;
    }
    let mut len = 0u64;
    for (i, &byte) in batch[1..].iter().enumerate().take(10) {
        len |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return (len < 1 << 35).then_some((i + 2, len));
        }
    }
    None
}

fn varint5(v: u64) -> [u8; 5] {
    debug_assert!(v < 1 << 35);
    let mut out = [0u8; 5];
    for (i, b) in out.iter_mut().enumerate() {
        *b = (v >> (7 * i)) as u8 & 0x7f | if i < 4 { 0x80 } else { 0 };
    }
    out
}

fn packet_header(len: u64) -> [u8; HDR as usize] {
    let v = varint5(len);
    [PACKET_TAG, v[0], v[1], v[2], v[3], v[4]]
}

fn push_pad_header(out: &mut Vec<u8>, payload: u64) {
    out.push(PAD_LEN_TAG);
    out.extend_from_slice(&varint5(payload));
}

/// `n` bytes (0 or 2..=11) of padding varint with value 0.
fn push_filler(out: &mut Vec<u8>, n: u64) {
    if n == 0 {
        return;
    }
    debug_assert!((2..=11).contains(&n));
    out.push(PAD_VARINT_TAG);
    out.extend(std::iter::repeat_n(0x80, n as usize - 2));
    out.push(0);
}

/// Bytes of filler so that a header at `at + fill` stays inside one page.
fn filler_before_header(at: u64) -> u64 {
    let left = PAGE - at % PAGE;
    match left {
        l if l >= HDR => 0,
        1 => 3,
        l => l,
    }
}

#[cfg(test)]
#[path = "commit_append_tests.rs"]
mod tests;

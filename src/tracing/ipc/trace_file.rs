//! A write_into_file session's output file. Regular files are appended to
//! through [`CommitAppender`], so a SIGKILL of traced at any instant leaves
//! whole packets (and a padding field readers skip); a pipe, a socket or a
//! file opened with O_APPEND (where pwrite cannot place bytes) gets plain
//! sequential writes cut back to whole packets on error.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use nix::fcntl::{fcntl, FcntlArg, OFlag};

use crate::protozero::commit_append::{CommitAppender, WriteAt};
use crate::protozero::decode::read_varint;

pub struct TraceFile {
    file: File,
    /// `None`: plain sequential writes.
    framing: Option<CommitAppender>,
}

struct Positioned<'a>(&'a File);

impl WriteAt for Positioned<'_> {
    type Error = io::Error;
    fn write_all_at(&mut self, buf: &[u8], at: u64) -> io::Result<()> {
        self.0.write_all_at(buf, at)
    }
}

impl TraceFile {
    /// Takes over `file`, appending from its current position.
    pub fn new(mut file: File) -> Self {
        let append_only = fcntl(file.as_raw_fd(), FcntlArg::F_GETFL)
            .map(|fl| OFlag::from_bits_truncate(fl).contains(OFlag::O_APPEND))
            .unwrap_or(true);
        let regular = file.metadata().is_ok_and(|m| m.is_file());
        let framing = match (regular && !append_only, file.stream_position()) {
            (true, Ok(at)) => Some(CommitAppender::new(at)),
            _ => None,
        };
        Self { file, framing }
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// Bytes of whole packets written so far (`None` for a plain stream).
    pub fn committed(&self) -> Option<u64> {
        self.framing.as_ref().map(CommitAppender::committed)
    }

    /// Appends whole packets. On an error the file is cut back to whole
    /// packets and the error says where.
    pub fn append(&mut self, data: &[u8]) -> Result<(), String> {
        let Some(framing) = self.framing.as_mut() else {
            return write_whole_packets(&mut self.file, data);
        };
        let Err(err) = framing.append(&mut Positioned(&self.file), data) else {
            return Ok(());
        };
        // Out of room (ENOSPC, EFBIG) for the padding: plain writes keep
        // every whole packet that still fits, as a sequential writer would.
        let keep = framing.committed();
        self.framing = None;
        if let Err(e) = self.truncate_to(keep) {
            return Err(format!(
                "Writing the trace file failed: {err}; cutting the file back to {keep} bytes \
                 failed too ({e})"
            ));
        }
        write_whole_packets(&mut self.file, data)
    }

    pub fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// Ends the file at its last packet and syncs it.
    pub fn finish(mut self) -> io::Result<()> {
        if let Some(len) = self.committed() {
            self.framing = None;
            self.truncate_to(len)?;
        }
        self.file.sync_data()
    }

    fn truncate_to(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)?;
        self.file.seek(SeekFrom::Start(len)).map(drop)
    }
}

impl Drop for TraceFile {
    /// A finished file ends with its last packet: the trailing padding
    /// goes, and the file position is where a sequential writer's would be.
    fn drop(&mut self) {
        if let Some(len) = self.committed() {
            let _ = self.truncate_to(len);
        }
    }
}

/// Sequential writes, cut back to the last whole packet on an error.
fn write_whole_packets(f: &mut File, data: &[u8]) -> Result<(), String> {
    let start = f.stream_position().map_err(|e| e.to_string())?;
    let mut done = 0;
    let err = loop {
        if done == data.len() {
            return Ok(());
        }
        match f.write(&data[done..]) {
            Ok(0) => break io::Error::from(io::ErrorKind::WriteZero),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => break e,
        }
    };
    let keep = start + whole_packets_len(&data[..done]) as u64;
    let cut = match f.set_len(keep).and_then(|_| f.seek(SeekFrom::Start(keep))) {
        Ok(_) => format!("the file is cut at the last whole packet ({keep} bytes)"),
        Err(e) => format!("cutting the file back to {keep} bytes failed too ({e})"),
    };
    Err(format!("Writing the trace file failed: {err}; {cut}"))
}

/// How many leading bytes of `data` are whole `Trace.packet` fields.
fn whole_packets_len(data: &[u8]) -> usize {
    let mut pos = 0;
    while pos < data.len() {
        let Some((_tag, n)) = read_varint(&data[pos..]) else {
            break;
        };
        let Some((len, m)) = read_varint(&data[pos + n..]) else {
            break;
        };
        let end = (pos + n + m) as u64 + len;
        if end > data.len() as u64 {
            break;
        }
        pos = end as usize;
    }
    pos
}

//! A write_into_file session's output file. Regular files are appended to
//! through [`CommitAppender`], so a SIGKILL of traced at any instant leaves
//! whole packets (and a padding field readers skip); a pipe, a socket or a
//! file opened with O_APPEND (where pwrite cannot place bytes) gets plain
//! sequential writes cut back to whole packets on error.

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, IoSlice, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::rc::Rc;

use nix::fcntl::{fcntl, FcntlArg, OFlag};

use crate::mem::small_map::SmallMap;
use crate::protozero::commit_append::{CommitAppender, WriteAt};
use crate::protozero::decode::read_varint;
use crate::tracing::service::types::SessionId;

/// The open output files by session, shared by the adapter and the
/// service's [`FileOutput`](crate::tracing::service::types::FileOutput).
pub type TraceFiles = Rc<RefCell<SmallMap<SessionId, TraceFile>>>;

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
    fn write_all_vectored_at(&mut self, parts: &[&[u8]], at: u64) -> io::Result<()> {
        write_all_gathered(parts, at, IOV_MAX, |iov, at| {
            nix::sys::uio::pwritev(self.0, iov, at as i64).map_err(io::Error::from)
        })
    }
}

/// Linux's limit of iovecs per call (UIO_MAXIOV).
const IOV_MAX: usize = 1024;

/// Writes the concatenation of `parts` at `at` through `pwritev` calls of
/// at most `max_iov` slices each, going on after short writes.
fn write_all_gathered(
    parts: &[&[u8]],
    mut at: u64,
    max_iov: usize,
    mut pwritev: impl FnMut(&[IoSlice], u64) -> io::Result<usize>,
) -> io::Result<()> {
    let mut iov: Vec<IoSlice> = Vec::with_capacity(parts.len().min(max_iov));
    let mut next = 0; // First part not yet in `iov`.
    let mut skip = 0; // Bytes of `parts[next]` already written.
    loop {
        iov.clear();
        let mut i = next;
        let mut off = skip;
        while iov.len() < max_iov && i < parts.len() {
            if off < parts[i].len() {
                iov.push(IoSlice::new(&parts[i][off..]));
            }
            i += 1;
            off = 0;
        }
        if iov.is_empty() {
            return Ok(());
        }
        let mut n = match pwritev(&iov, at) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        at += n as u64;
        // Move past what was written, part by part.
        while n > 0 {
            let left = parts[next].len() - skip;
            if n < left {
                skip += n;
                break;
            }
            n -= left;
            next += 1;
            skip = 0;
        }
        while next < parts.len() && parts[next].len() == skip {
            next += 1;
            skip = 0;
        }
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
        self.append_parts(&[data])
    }

    /// [`Self::append`] of the concatenation of `parts`, written from the
    /// parts themselves (pwritev) into a regular file.
    pub fn append_parts(&mut self, parts: &[&[u8]]) -> Result<(), String> {
        let Some(framing) = self.framing.as_mut() else {
            return write_whole_packets(&mut self.file, &parts.concat());
        };
        let Err(err) = framing.append_parts(&mut Positioned(&self.file), parts) else {
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
        write_whole_packets(&mut self.file, &parts.concat())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs [`write_all_gathered`] against a file image whose pwritev takes
    /// at most `short` bytes a call; returns the image and each call's
    /// slice count.
    fn gathered(parts: &[&[u8]], at: u64, max_iov: usize, short: usize) -> (Vec<u8>, Vec<usize>) {
        let mut image = vec![b'.'; at as usize];
        let mut calls = Vec::new();
        write_all_gathered(parts, at, max_iov, |iov, off| {
            assert!(iov.len() <= max_iov && !iov.is_empty());
            assert_eq!(off as usize, image.len());
            calls.push(iov.len());
            let mut n = 0;
            for s in iov {
                let k = s.len().min(short - n);
                image.extend_from_slice(&s[..k]);
                n += k;
                if n == short {
                    break;
                }
            }
            Ok(n)
        })
        .unwrap();
        (image, calls)
    }

    #[test]
    fn gathered_writes_go_on_after_short_writes() {
        let parts: [&[u8]; 5] = [b"abc", b"", b"defgh", b"i", b"jklmnop"];
        for short in 1..20 {
            for max_iov in 1..7 {
                let (image, _) = gathered(&parts, 3, max_iov, short);
                assert_eq!(image, b"...abcdefghijklmnop", "short {short} iov {max_iov}");
            }
        }
    }

    #[test]
    fn gathered_writes_stay_within_the_iovec_limit() {
        let bytes: Vec<u8> = (0..=255).collect();
        let parts: Vec<&[u8]> = bytes.chunks(1).collect();
        let (image, calls) = gathered(&parts, 0, IOV_MAX.min(100), usize::MAX);
        assert_eq!(image, bytes);
        assert_eq!(calls, [100, 100, 56]);
    }

    #[test]
    fn gathered_write_errors_reach_the_caller() {
        let parts: [&[u8]; 2] = [b"ab", b"cd"];
        let mut tries = 0;
        let err = write_all_gathered(&parts, 0, 4, |_, _| {
            tries += 1;
            match tries {
                1 => Err(io::ErrorKind::Interrupted.into()),
                2 => Ok(1),
                _ => Err(io::Error::from_raw_os_error(libc::ENOSPC)),
            }
        })
        .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(tries, 3);
        assert_eq!(
            write_all_gathered(&parts, 0, 4, |_, _| Ok(0))
                .unwrap_err()
                .kind(),
            io::ErrorKind::WriteZero
        );
    }

    #[test]
    fn a_regular_file_gets_the_parts_whole() {
        let f = memfd::MemfdOptions::default()
            .create("parts")
            .unwrap()
            .into_file();
        let mut t = TraceFile::new(f);
        let mut bytes = Vec::new();
        for i in 0..3000u32 {
            bytes.extend_from_slice(&[0x0a, 4]);
            bytes.extend_from_slice(&i.to_le_bytes());
        }
        // Parts of 1..=6 bytes: more slices than one pwritev takes.
        let parts: Vec<&[u8]> = bytes.chunks(5).collect();
        assert!(parts.len() > IOV_MAX);
        t.append_parts(&parts).unwrap();
        let len = t.committed().unwrap();
        let f = t.file().try_clone().unwrap();
        drop(t);
        // The first packet's header took the appender's 6-byte form.
        assert_eq!(len, bytes.len() as u64 + 4);
        assert_eq!(f.metadata().unwrap().len(), len);
        let mut got = vec![0u8; len as usize];
        f.read_exact_at(&mut got, 0).unwrap();
        assert_eq!(got[..6], [0x0a, 0x84, 0x80, 0x80, 0x80, 0]);
        assert_eq!(got[6..], bytes[2..]);
    }
}

//! Copying a write_into_file session's trace file for CloneSession.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

const STEP: usize = 256 * 1024;

/// Appends what `src` holds (from offset 0, up to `len` when given: its
/// whole packets, not the padding after them; without moving its file
/// position) to `dst`. A write-only `src` (a client's `O_WRONLY` file) is
/// reopened for reading through /proc.
pub fn copy_contents(src: &File, len: Option<u64>, dst: &mut File) -> io::Result<()> {
    let len = len.unwrap_or(u64::MAX);
    let mut buf = vec![0u8; STEP];
    let mut reopened = None;
    let mut from = src;
    let mut off = 0u64;
    loop {
        let want = buf.len().min((len - off).try_into().unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(());
        }
        let n = match from.read_at(&mut buf[..want], off) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EBADF) && off == 0 => {
                from = reopened.insert(File::open(format!("/proc/self/fd/{}", src.as_raw_fd()))?);
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok(());
        }
        dst.write_all(&buf[..n])?;
        off += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn copies_from_the_start_and_leaves_the_source_position() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("src");
        let mut src = File::create(&p).unwrap(); // write-only
        let data: Vec<u8> = (0..STEP * 2 + 17).map(|i| i as u8).collect();
        src.write_all(&data).unwrap();
        let mut dst = tempfile::tempfile().unwrap();
        dst.write_all(b"x").unwrap();
        copy_contents(&src, None, &mut dst).unwrap();
        src.write_all(b"tail").unwrap();
        let mut got = Vec::new();
        let mut d = dst.try_clone().unwrap();
        std::io::Seek::rewind(&mut d).unwrap();
        d.read_to_end(&mut got).unwrap();
        assert_eq!(got[0], b'x');
        assert_eq!(&got[1..], &data[..]);
        let all = std::fs::read(&p).unwrap();
        assert!(all.ends_with(b"tail") && all.len() == data.len() + 4);
    }
}

//! Per-cpu reader of `trace_pipe_raw` with plain non-blocking `read()` of
//! one ring-buffer page at a time, on the main thread (what upstream
//! traced_probes does). Same shape as the splice-based reader being built
//! in `probes::ftrace`, which can replace it.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;

use crate::probes::ftrace::Tracefs;

/// Most pages per cpu per periodic read pass (upstream's work limit).
pub const MAX_PAGES_PER_PASS: usize = 256;

#[derive(Debug)]
pub struct PageReader {
    cpus: Vec<File>,
    page_size: usize,
    buf: Vec<u8>,
    /// Read errors other than "nothing to read".
    pub errors: u64,
}

impl PageReader {
    pub fn open(tracefs: &Tracefs, page_size: usize) -> io::Result<PageReader> {
        let mut cpus = Vec::new();
        for cpu in 0..tracefs.num_cpus()? {
            cpus.push(
                OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(tracefs.trace_pipe_raw_path(cpu))?,
            );
        }
        Ok(PageReader {
            cpus,
            page_size,
            buf: Vec::new(),
            errors: 0,
        })
    }

    /// Reads what each cpu has (up to `max_pages` pages, or everything with
    /// `usize::MAX`) and hands it to `f(cpu, pages)`. Returns true if some
    /// cpu hit the limit (more data is waiting).
    pub fn read_pass(&mut self, max_pages: usize, f: &mut dyn FnMut(usize, &[u8])) -> bool {
        let ps = self.page_size;
        let mut more = false;
        for (cpu, file) in self.cpus.iter_mut().enumerate() {
            self.buf.clear();
            let mut pages = 0;
            while pages < max_pages {
                let start = self.buf.len();
                self.buf.resize(start + ps, 0);
                match file.read(&mut self.buf[start..]) {
                    Ok(n) if n > 0 => {
                        // A short read is a partial page: keep it page-sized.
                        pages += 1;
                    }
                    Ok(_) => {
                        self.buf.truncate(start);
                        break;
                    }
                    Err(e) => {
                        self.buf.truncate(start);
                        let quiet = matches!(
                            e.raw_os_error(),
                            Some(libc::EAGAIN | libc::ENOMEM | libc::EBUSY | libc::ENODEV)
                        ) || e.kind() == io::ErrorKind::Interrupted;
                        if !quiet {
                            self.errors += 1;
                        }
                        break;
                    }
                }
            }
            if pages == max_pages {
                more = true;
            }
            if !self.buf.is_empty() {
                f(cpu, &self.buf);
            }
        }
        more
    }
}

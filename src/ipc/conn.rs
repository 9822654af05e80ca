//! One framed connection: a non-blocking [`UnixStream`], a frame decoder,
//! a bounded send queue and the fd-passing rules of the protocol.
//!
//! * Sending never blocks: what the socket does not take is queued, up to
//!   `max_queued` bytes; beyond that [`SendError::QueueFull`] and the owner
//!   drops the peer (a stuck reader must not wedge us).
//! * An fd to send rides on the first `sendmsg` chunk of its frame.
//! * A received fd belongs to the frame holding the last byte of the
//!   `recvmsg` it came with: the kernel ends a stream read right after the
//!   segment carrying fds, and senders attach the fd to the first chunk of
//!   its frame, so earlier bytes of that read belong to earlier frames.
//!   (Perfetto instead stashes the fd until some handler takes it; this
//!   gives the same answer for correct senders without relying on which
//!   handlers ask.) An fd whose frame was discarded is closed.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::base::unix_socket::UnixStream;
use crate::pb::protos::IPCFrame;

use super::frame::{encode_frame, FrameDecoder, FrameTooLarge, IPC_BUFFER_SIZE};

/// Default bound on bytes queued for a peer that is not reading.
pub const DEFAULT_MAX_QUEUED_BYTES: usize = 4 * 1024 * 1024;

/// A decoded frame and the fd that arrived with it.
#[derive(Debug)]
pub struct Received {
    /// The frame.
    pub frame: IPCFrame,
    /// `SCM_RIGHTS` fd that arrived with this frame.
    pub fd: Option<OwnedFd>,
    /// Stream offset of the frame's first byte (0: nothing came before it,
    /// not even an empty or unparsable frame).
    pub offset: u64,
}

/// Why a frame could not be queued.
#[derive(Debug)]
pub enum SendError {
    /// The frame exceeds the protocol limit; nothing was queued.
    TooLarge(FrameTooLarge),
    /// The peer is not reading and the queue is full.
    QueueFull {
        /// Bytes already waiting.
        queued: usize,
    },
    /// The socket failed (peer gone).
    Io(io::Error),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::TooLarge(e) => e.fmt(f),
            SendError::QueueFull { queued } => {
                write!(f, "send queue full ({queued} bytes pending)")
            }
            SendError::Io(e) => write!(f, "send failed: {e}"),
        }
    }
}

impl std::error::Error for SendError {}

/// Why reading stopped for good.
#[derive(Debug)]
pub enum RecvError {
    /// Socket error.
    Io(io::Error),
    /// The peer announced an oversized frame.
    TooLarge(FrameTooLarge),
}

impl std::fmt::Display for RecvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecvError::Io(e) => write!(f, "receive failed: {e}"),
            RecvError::TooLarge(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for RecvError {}

/// Result of one [`Conn::read_some`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadStatus {
    /// Bytes were read; call again (edge-triggered sockets must be drained).
    Progress,
    /// Nothing more to read for now.
    WouldBlock,
    /// The peer closed the connection.
    Eof,
}

/// A received fd waiting for its frame to complete.
#[derive(Debug)]
struct PendingFd {
    fd: OwnedFd,
    /// Stream offset just past the `recvmsg` that brought it.
    chunk_end: u64,
}

/// At most this many fds wait for their frames; a peer sending more is
/// breaking the one-fd-per-frame rule and the oldest are closed.
const MAX_PENDING_FDS: usize = 4;

#[derive(Debug)]
struct OutFrame {
    bytes: Vec<u8>,
    sent: usize,
    fd: Option<OwnedFd>,
}

/// A bound on the bytes queued by all the connections that share it (a
/// host's clients): each also has its own bound, and together they cannot
/// hold more than this however many there are.
#[derive(Debug)]
pub struct QueueBudget {
    used: AtomicUsize,
    max: usize,
}

impl QueueBudget {
    pub fn new(max: usize) -> Arc<QueueBudget> {
        Arc::new(QueueBudget {
            used: AtomicUsize::new(0),
            max,
        })
    }

    /// Bytes queued now by all the connections sharing it.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

/// A framed, non-blocking connection.
#[derive(Debug)]
pub struct Conn {
    sock: UnixStream,
    decoder: FrameDecoder,
    out: VecDeque<OutFrame>,
    queued_bytes: usize,
    max_queued: usize,
    budget: Option<Arc<QueueBudget>>,
    rx_fds: VecDeque<PendingFd>,
    /// Bytes received so far (stream offset of the next read).
    received: u64,
}

thread_local! {
    /// One receive buffer per thread, shared by all its connections: a
    /// per-connection one would cost 128 KiB for every idle peer.
    static READ_BUF: std::cell::RefCell<Box<[u8]>> =
        std::cell::RefCell::new(vec![0u8; IPC_BUFFER_SIZE].into_boxed_slice());
}

impl Conn {
    /// Wraps a connected non-blocking socket.
    pub fn new(sock: UnixStream, max_queued: usize) -> Self {
        Conn {
            sock,
            decoder: FrameDecoder::new(),
            out: VecDeque::new(),
            queued_bytes: 0,
            max_queued,
            budget: None,
            rx_fds: VecDeque::new(),
            received: 0,
        }
    }

    /// Also bounds this connection's queue by `budget`, shared with others.
    pub fn with_budget(mut self, budget: Arc<QueueBudget>) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Room to queue `n` more bytes, within this connection's bound and the
    /// shared budget.
    fn make_room(&mut self, n: usize) -> Result<(), SendError> {
        let full = SendError::QueueFull {
            queued: self.queued_bytes,
        };
        if self.queued_bytes + n > self.max_queued {
            return Err(full);
        }
        if let Some(b) = &self.budget {
            let took = b
                .used
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                    (u + n <= b.max).then_some(u + n)
                });
            if took.is_err() {
                return Err(full);
            }
        }
        self.queued_bytes += n;
        Ok(())
    }

    fn release(&mut self, n: usize) {
        self.queued_bytes -= n;
        if let Some(b) = &self.budget {
            b.used.fetch_sub(n, Ordering::Relaxed);
        }
    }

    /// The socket (for registration and credentials).
    pub fn socket(&self) -> &UnixStream {
        &self.sock
    }

    /// Bytes queued but not yet accepted by the kernel.
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// Frames dropped because they did not parse.
    pub fn frames_discarded(&self) -> u64 {
        self.decoder.discarded()
    }

    /// Bytes of whole frames taken from the stream so far (returned,
    /// empty or unparsable).
    pub fn bytes_consumed(&self) -> u64 {
        self.decoder.consumed()
    }

    /// Serializes and queues `frame` (with `fd`, if any), then tries to
    /// flush. A socket error is reported here or by a later flush.
    pub fn send(&mut self, frame: &IPCFrame, fd: Option<OwnedFd>) -> Result<(), SendError> {
        let bytes = encode_frame(frame).map_err(SendError::TooLarge)?;
        self.make_room(bytes.len())?;
        self.out.push_back(OutFrame { bytes, sent: 0, fd });
        self.flush().map_err(SendError::Io)
    }

    /// Sends already framed bytes (one or more whole frames, no fd): written
    /// straight from `bytes` when nothing is queued, and only what the
    /// socket does not take is copied into the queue. Returns true if
    /// nothing is left queued (the socket may take more now).
    pub fn send_framed(&mut self, bytes: &[u8]) -> Result<bool, SendError> {
        let mut sent = 0;
        if self.out.is_empty() {
            while sent < bytes.len() {
                match self.sock.send(&bytes[sent..], None) {
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(SendError::Io(e)),
                }
            }
        }
        let rest = &bytes[sent..];
        if rest.is_empty() {
            return Ok(self.out.is_empty());
        }
        self.make_room(rest.len())?;
        self.out.push_back(OutFrame {
            bytes: rest.to_vec(),
            sent: 0,
            fd: None,
        });
        Ok(false)
    }

    /// Writes queued bytes until the queue is empty or the socket is full.
    pub fn flush(&mut self) -> io::Result<()> {
        while let Some(front) = self.out.front_mut() {
            // The fd goes only with the first chunk of its frame.
            let fd = if front.sent == 0 {
                front.fd.as_ref().map(|f| f.as_fd())
            } else {
                None
            };
            let n = match self.sock.send(&front.bytes[front.sent..], fd) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            };
            front.sent += n;
            if front.sent == front.bytes.len() {
                self.out.pop_front();
            } else if n > 0 {
                front.fd = None; // Delivered with this chunk.
            }
            self.release(n);
        }
        Ok(())
    }

    /// True if queued bytes are waiting for the socket to drain.
    pub fn has_pending_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// One `recvmsg` (up to one frame's worth), decoding any complete
    /// frames into `out`.
    pub fn read_some(&mut self, out: &mut Vec<Received>) -> Result<ReadStatus, RecvError> {
        READ_BUF.with(|b| self.read_some_into(&mut b.borrow_mut(), out))
    }

    fn read_some_into(
        &mut self,
        read_buf: &mut [u8],
        out: &mut Vec<Received>,
    ) -> Result<ReadStatus, RecvError> {
        let (n, fd) = match self.sock.recv(read_buf) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(ReadStatus::WouldBlock),
            // A peer that closes with bytes of ours unread resets the
            // connection (every `perfetto` run ended that way): still a close.
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(ReadStatus::Eof),
            Err(e) => return Err(RecvError::Io(e)),
        };
        self.received += n as u64;
        if let Some(fd) = fd {
            if n > 0 {
                if self.rx_fds.len() == MAX_PENDING_FDS {
                    self.rx_fds.pop_front();
                }
                self.rx_fds.push_back(PendingFd {
                    fd,
                    chunk_end: self.received,
                });
            }
        }
        if n == 0 {
            return Ok(ReadStatus::Eof);
        }
        self.decoder.push(&read_buf[..n]);
        while let Some(frame) = self.decoder.next_frame().map_err(RecvError::TooLarge)? {
            let (start, end) = self.decoder.last_span();
            // The frame owns an fd if it holds the last byte of its chunk.
            let mut fd = None;
            while let Some(p) = self.rx_fds.front() {
                if p.chunk_end <= start {
                    self.rx_fds.pop_front(); // Its frame was discarded.
                } else if p.chunk_end <= end {
                    let p = self.rx_fds.pop_front().unwrap();
                    // A second fd for the same frame breaks the rules: closed.
                    fd.get_or_insert(p.fd);
                } else {
                    break;
                }
            }
            out.push(Received {
                frame,
                fd,
                offset: start,
            });
        }
        // Fds whose frames were skipped as empty or unparsable.
        let consumed = self.decoder.consumed();
        while self.rx_fds.front().is_some_and(|p| p.chunk_end <= consumed) {
            self.rx_fds.pop_front();
        }
        Ok(ReadStatus::Progress)
    }
}

impl Drop for Conn {
    /// What it still had queued goes back to the shared budget.
    fn drop(&mut self) {
        let n = self.queued_bytes;
        self.release(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::unix_socket::wait_ready;
    use crate::pb::protos::mod_IPCFrame::{InvokeMethod, OneOfmsg};

    fn invoke(id: u64) -> IPCFrame {
        IPCFrame {
            request_id: Some(id),
            msg: OneOfmsg::msg_invoke_method(InvokeMethod {
                method_id: Some(1),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn read_all(c: &mut Conn, want: usize) -> Vec<Received> {
        let mut out = Vec::new();
        while out.len() < want {
            wait_ready(c.socket().as_fd(), true, false, None).unwrap();
            c.read_some(&mut out).unwrap();
        }
        out
    }

    fn null_fd() -> OwnedFd {
        std::fs::File::open("/dev/null").unwrap().into()
    }

    #[test]
    fn a_peer_closing_with_unread_data_is_a_plain_close() {
        let (a, b) = UnixStream::pair().unwrap();
        let (peer, mut me) = (Conn::new(a, 1 << 20), Conn::new(b, 1 << 20));
        // The peer has bytes from us it never reads, then closes: the
        // kernel resets the connection instead of a clean EOF.
        me.send(&invoke(1), None).unwrap();
        drop(peer);
        wait_ready(me.socket().as_fd(), true, false, None).unwrap();
        let mut out = Vec::new();
        assert_eq!(me.read_some(&mut out).unwrap(), ReadStatus::Eof);
    }

    #[test]
    fn fd_goes_to_its_own_frame_when_frames_arrive_together() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut tx, mut rx) = (Conn::new(a, 1 << 20), Conn::new(b, 1 << 20));
        // Queued back to back: one recvmsg returns frame 1 and frame 2 + fd.
        tx.send(&invoke(1), None).unwrap();
        tx.send(&invoke(2), Some(null_fd())).unwrap();
        tx.send(&invoke(3), None).unwrap();
        let got = read_all(&mut rx, 3);
        let with_fd: Vec<(u64, bool)> = got
            .iter()
            .map(|r| (r.frame.request_id.unwrap(), r.fd.is_some()))
            .collect();
        assert_eq!(with_fd, vec![(1, false), (2, true), (3, false)]);
    }

    #[test]
    fn fd_of_a_discarded_frame_is_not_given_to_the_next() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut rx = Conn::new(b, 1 << 20);
        // An unparsable frame carrying an fd, then a valid frame.
        a.send(&[3, 0, 0, 0, 0x0f, 0xff, 0xff], Some(null_fd().as_fd()))
            .unwrap();
        let mut tx = Conn::new(a, 1 << 20);
        tx.send(&invoke(7), None).unwrap();
        let got = read_all(&mut rx, 1);
        assert_eq!(got[0].frame.request_id, Some(7));
        assert!(got[0].fd.is_none());
        assert_eq!(rx.frames_discarded(), 1);
    }

    #[test]
    fn framed_bytes_are_written_through_and_queued_only_when_full() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut tx, mut rx) = (Conn::new(a, 64 << 20), Conn::new(b, 1 << 20));
        let frames: Vec<Vec<u8>> = (1..=40)
            .map(|i| encode_frame(&invoke(i)).unwrap())
            .collect();
        // Small frames go straight to the socket.
        assert!(tx.send_framed(&frames[0]).unwrap());
        assert_eq!(tx.queued_bytes(), 0);
        // Big writes fill the socket; the rest waits, in order, after any
        // frame already queued.
        let big = IPCFrame {
            data_for_testing: vec![vec![1; 100_000]],
            ..Default::default()
        };
        let big = encode_frame(&big).unwrap();
        let mut all_written = true;
        for _ in 0..64 {
            all_written &= tx.send_framed(&big).unwrap();
        }
        assert!(!all_written);
        assert!(tx.queued_bytes() > 0);
        tx.send(&invoke(2), None).unwrap();
        assert!(!tx.send_framed(&frames[2]).unwrap());
        let mut got = Vec::new();
        while got.len() < 67 {
            tx.flush().unwrap();
            wait_ready(rx.socket().as_fd(), true, false, None).unwrap();
            rx.read_some(&mut got).unwrap();
        }
        let ids: Vec<u64> = got
            .iter()
            .map(|r| r.frame.request_id.unwrap_or(0))
            .collect();
        assert_eq!(ids[0], 1);
        assert!(ids[1..65].iter().all(|&i| i == 0));
        assert_eq!(&ids[65..], &[2, 3]);
        assert_eq!(tx.queued_bytes(), 0);
    }

    /// Issue 33: 256 consumers of 16 MiB each must not add up to 4 GiB.
    #[test]
    fn a_shared_budget_bounds_all_queues_together() {
        let budget = QueueBudget::new(300 * 1024);
        let big = IPCFrame {
            data_for_testing: vec![vec![0; 100_000]],
            ..Default::default()
        };
        let mut peers = Vec::new();
        let mut conns: Vec<Conn> = (0..8)
            .map(|_| {
                let (a, b) = UnixStream::pair().unwrap();
                peers.push(b);
                Conn::new(a, 16 << 20).with_budget(budget.clone())
            })
            .collect();
        let mut refused = 0;
        for c in conns.iter_mut() {
            while c.send(&big, None).is_ok() {}
            refused += 1;
        }
        assert_eq!(refused, 8);
        assert!(budget.used() <= 300 * 1024, "{}", budget.used());
        let held: usize = conns.iter().map(Conn::queued_bytes).sum();
        assert_eq!(held, budget.used());
        // A closed connection gives its share back.
        conns.truncate(1);
        assert_eq!(budget.used(), conns[0].queued_bytes());
    }

    #[test]
    fn queue_bound_is_enforced() {
        let (a, _b) = UnixStream::pair().unwrap();
        let mut tx = Conn::new(a, 256 * 1024);
        let big = IPCFrame {
            data_for_testing: vec![vec![0; 100_000]],
            ..Default::default()
        };
        let err = loop {
            if let Err(e) = tx.send(&big, None) {
                break e;
            }
        };
        assert!(matches!(err, SendError::QueueFull { .. }), "{err}");
        assert!(tx.queued_bytes() <= 256 * 1024);
    }
}

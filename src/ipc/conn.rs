//! One framed connection: a non-blocking [`UnixStream`], a frame decoder,
//! a bounded send queue and the fd-passing rules of the protocol.
//!
//! * Sending never blocks: what the socket does not take is queued, up to
//!   `max_queued` bytes; beyond that [`SendError::QueueFull`] and the owner
//!   drops the peer (a stuck reader must not wedge us).
//! * An fd to send rides on the first `sendmsg` chunk of its frame.
//! * A received fd is stashed and handed out with the next complete frame.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

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
    /// `SCM_RIGHTS` fd that arrived with (or just before) this frame.
    pub fd: Option<OwnedFd>,
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
            SendError::QueueFull { queued } => write!(f, "send queue full ({queued} bytes pending)"),
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

#[derive(Debug)]
struct OutFrame {
    bytes: Vec<u8>,
    sent: usize,
    fd: Option<OwnedFd>,
}

/// A framed, non-blocking connection.
#[derive(Debug)]
pub struct Conn {
    sock: UnixStream,
    decoder: FrameDecoder,
    out: VecDeque<OutFrame>,
    queued_bytes: usize,
    max_queued: usize,
    rx_fd: Option<OwnedFd>,
    read_buf: Box<[u8]>,
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
            rx_fd: None,
            read_buf: vec![0u8; IPC_BUFFER_SIZE].into_boxed_slice(),
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

    /// Serializes and queues `frame` (with `fd`, if any), then tries to
    /// flush. A socket error is reported here or by a later flush.
    pub fn send(&mut self, frame: &IPCFrame, fd: Option<OwnedFd>) -> Result<(), SendError> {
        let bytes = encode_frame(frame).map_err(SendError::TooLarge)?;
        if self.queued_bytes + bytes.len() > self.max_queued {
            return Err(SendError::QueueFull { queued: self.queued_bytes });
        }
        self.queued_bytes += bytes.len();
        self.out.push_back(OutFrame { bytes, sent: 0, fd });
        self.flush().map_err(SendError::Io)
    }

    /// Writes queued bytes until the queue is empty or the socket is full.
    pub fn flush(&mut self) -> io::Result<()> {
        while let Some(front) = self.out.front_mut() {
            // The fd goes only with the first chunk of its frame.
            let fd = if front.sent == 0 { front.fd.as_ref().map(|f| f.as_fd()) } else { None };
            match self.sock.send(&front.bytes[front.sent..], fd) {
                Ok(n) => {
                    front.sent += n;
                    self.queued_bytes -= n;
                    if front.sent == front.bytes.len() {
                        self.out.pop_front();
                    } else if n > 0 {
                        front.fd = None; // Delivered with this chunk.
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
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
        let (n, fd) = match self.sock.recv(&mut self.read_buf) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(ReadStatus::WouldBlock),
            Err(e) => return Err(RecvError::Io(e)),
        };
        if fd.is_some() {
            // A newer fd replaces (closes) one nobody took.
            self.rx_fd = fd;
        }
        if n == 0 {
            return Ok(ReadStatus::Eof);
        }
        self.decoder.push(&self.read_buf[..n]);
        while let Some(frame) = self.decoder.next_frame().map_err(RecvError::TooLarge)? {
            out.push(Received { frame, fd: self.rx_fd.take() });
        }
        Ok(ReadStatus::Progress)
    }
}

//! The single-threaded event loop every daemon runs on: mio `Poll` for fds,
//! a mio `Waker` for messages posted from other threads, and our own timer
//! heap (mio has no timers).
//!
//! # Contract
//!
//! * The application owns its state in one value implementing [`Handler`].
//!   The loop calls `on_io`, `on_timer` and `on_message` with a [`LoopCtl`],
//!   which registers fds, arms timers, posts messages and quits.
//! * Fd registrations are **edge-triggered** (mio uses `EPOLLET`): after a
//!   readiness event the handler must read/write until `WouldBlock`,
//!   otherwise it may never hear about that fd again.
//! * Tokens are allocated by the loop and never reused, so an event for a
//!   token the handler already dropped can simply be ignored.
//! * Logic that needs only time, timers and posting should take
//!   `&mut dyn TaskRunner<M>`; it then also runs on the deterministic
//!   [`TestLoop`](super::test_loop::TestLoop) without sleeping.
//! * Each pass delivers: fd events from the last wait, due timers, then
//!   the messages queued before the pass (local posts and those from other
//!   threads); then it waits. If a callback quits, undelivered events stay
//!   queued for the next [`EventLoop::run`].
//!
//! ```no_run
//! use std::time::Duration;
//! use tracebox::base::event_loop::*;
//!
//! struct App { ticks: u32 }
//! impl Handler for App {
//!     type Msg = String;
//!     fn on_timer(&mut self, ctl: &mut LoopCtl<'_, String>, _id: TimerId) {
//!         self.ticks += 1;
//!         if self.ticks == 3 { ctl.quit(); }
//!     }
//!     fn on_message(&mut self, _ctl: &mut LoopCtl<'_, String>, msg: String) {
//!         println!("got {msg}");
//!     }
//! }
//!
//! let mut el = EventLoop::new().unwrap();
//! let remote = el.remote();
//! std::thread::spawn(move || { let _ = remote.post("hello".into()); });
//! el.ctl().add_periodic_timer(Duration::from_millis(10));
//! el.run(&mut App { ticks: 0 }).unwrap();
//! ```

use std::collections::VecDeque;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Poll, Registry, Waker};

use super::timers::TimerHeap;
pub use super::timers::TimerId;
pub use mio::{Interest, Token};

/// What pure logic needs from a loop: a clock, timers and self-posting.
/// Implemented by [`LoopCtl`] (real time) and
/// [`TestLoop`](super::test_loop::TestLoop) (fake time).
pub trait TaskRunner<M> {
    /// Monotonic now (fake on the test loop).
    fn now(&self) -> Instant;
    /// One-shot timer; the handler's `on_timer(id)` runs once after `delay`.
    fn add_timer(&mut self, delay: Duration) -> TimerId;
    /// Periodic timer: first fires after `period`, then every `period`.
    fn add_periodic_timer(&mut self, period: Duration) -> TimerId;
    /// Disarms a timer. Returns false if it already fired (one-shot) or is unknown.
    fn cancel_timer(&mut self, id: TimerId) -> bool;
    /// Queues `msg` for `on_message`, after the current callback returns.
    fn post(&mut self, msg: M);
}

/// Readiness reported for a registered fd.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ready {
    /// Data (or EOF) can be read.
    pub readable: bool,
    /// The send buffer has room.
    pub writable: bool,
    /// Hang-up or error: the next read/write will say what happened.
    pub closed: bool,
}

impl Ready {
    fn from_event(e: &mio::event::Event) -> Self {
        Ready {
            readable: e.is_readable(),
            writable: e.is_writable(),
            closed: e.is_read_closed() || e.is_write_closed() || e.is_error(),
        }
    }
}

/// The application's callbacks. All default to doing nothing.
pub trait Handler {
    /// Messages posted locally or from other threads.
    type Msg: Send + 'static;
    /// A registered fd became ready (edge-triggered: drain it).
    fn on_io(&mut self, _ctl: &mut LoopCtl<'_, Self::Msg>, _token: Token, _ready: Ready) {}
    /// A timer armed through the ctl fired.
    fn on_timer(&mut self, _ctl: &mut LoopCtl<'_, Self::Msg>, _id: TimerId) {}
    /// A posted message arrived.
    fn on_message(&mut self, _ctl: &mut LoopCtl<'_, Self::Msg>, _msg: Self::Msg) {}
}

/// Error from [`RemoteHandle::post`]: the loop was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopGone;

impl std::fmt::Display for LoopGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("event loop is gone")
    }
}
impl std::error::Error for LoopGone {}

/// Thread-safe, cloneable handle that posts messages into a loop and wakes it.
/// `M` may be a boxed closure if the application wants "post a task".
#[derive(Debug)]
pub struct RemoteHandle<M> {
    tx: mpsc::Sender<M>,
    waker: Arc<Waker>,
}

impl<M> Clone for RemoteHandle<M> {
    fn clone(&self) -> Self {
        RemoteHandle {
            tx: self.tx.clone(),
            waker: self.waker.clone(),
        }
    }
}

impl<M> RemoteHandle<M> {
    /// Sends `msg` to the loop's `on_message`.
    pub fn post(&self, msg: M) -> Result<(), LoopGone> {
        self.tx.send(msg).map_err(|_| LoopGone)?;
        self.waker.wake().map_err(|_| LoopGone)
    }
}

const WAKER_TOKEN: Token = Token(usize::MAX);

/// Loop state reachable from callbacks (everything but `Poll`/`Events`).
#[derive(Debug)]
struct Core<M> {
    registry: Registry,
    timers: TimerHeap,
    local: VecDeque<M>,
    pending_io: VecDeque<(Token, Ready)>,
    rx: mpsc::Receiver<M>,
    tx: mpsc::Sender<M>,
    waker: Arc<Waker>,
    next_token: usize,
    quit: bool,
}

/// The real loop. One per thread; not `Send` by design of its users.
#[derive(Debug)]
pub struct EventLoop<M> {
    poll: Poll,
    events: Events,
    core: Core<M>,
}

/// Control surface handed to callbacks (and available before `run`).
#[derive(Debug)]
pub struct LoopCtl<'a, M> {
    core: &'a mut Core<M>,
}

impl<M: Send + 'static> EventLoop<M> {
    /// Creates the epoll instance and the waker.
    pub fn new() -> io::Result<Self> {
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER_TOKEN)?);
        let (tx, rx) = mpsc::channel();
        Ok(EventLoop {
            poll,
            events: Events::with_capacity(256),
            core: Core {
                registry,
                timers: TimerHeap::new(),
                local: VecDeque::new(),
                pending_io: VecDeque::new(),
                rx,
                tx,
                waker,
                next_token: 0,
                quit: false,
            },
        })
    }

    /// The control surface, for setup before [`run`](Self::run).
    pub fn ctl(&mut self) -> LoopCtl<'_, M> {
        LoopCtl {
            core: &mut self.core,
        }
    }

    /// A handle for other threads.
    pub fn remote(&self) -> RemoteHandle<M> {
        RemoteHandle {
            tx: self.core.tx.clone(),
            waker: self.core.waker.clone(),
        }
    }

    /// Runs until a callback calls [`LoopCtl::quit`]. Returns early only if
    /// `epoll_wait` itself fails. Can be called again after a quit; it
    /// resumes with whatever was not delivered yet.
    pub fn run<H: Handler<Msg = M>>(&mut self, handler: &mut H) -> io::Result<()> {
        self.core.quit = false;
        loop {
            // 1. Fd events not yet delivered (left over if a callback quit).
            while let Some((token, ready)) = self.core.pending_io.pop_front() {
                handler.on_io(
                    &mut LoopCtl {
                        core: &mut self.core,
                    },
                    token,
                    ready,
                );
                if self.core.quit {
                    return Ok(());
                }
            }

            // 2. Due timers. `now` is a snapshot and periodic timers re-arm
            // at least 1 ms ahead, so timers cannot starve fds.
            let now = Instant::now();
            while let Some(id) = self.core.timers.pop_due(now) {
                handler.on_timer(
                    &mut LoopCtl {
                        core: &mut self.core,
                    },
                    id,
                );
                if self.core.quit {
                    return Ok(());
                }
            }

            // 3. Messages queued before this pass; ones posted while these
            // run wait for the next pass, so a self-reposting handler
            // cannot starve fds either.
            for _ in 0..self.core.local.len() {
                let Some(msg) = self.core.local.pop_front() else {
                    break;
                };
                handler.on_message(
                    &mut LoopCtl {
                        core: &mut self.core,
                    },
                    msg,
                );
                if self.core.quit {
                    return Ok(());
                }
            }

            // 4. Wait for fds, the waker or the next timer.
            let timeout = if self.core.local.is_empty() {
                self.core
                    .timers
                    .next_deadline()
                    .map(|d| d.saturating_duration_since(Instant::now()))
            } else {
                Some(Duration::ZERO)
            };
            match self.poll.poll(&mut self.events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for event in self.events.iter() {
                // The waker only interrupts the wait; its queue is drained below.
                if event.token() != WAKER_TOKEN {
                    self.core
                        .pending_io
                        .push_back((event.token(), Ready::from_event(event)));
                }
            }
            while let Ok(msg) = self.core.rx.try_recv() {
                self.core.local.push_back(msg);
            }
        }
    }
}

impl<M> LoopCtl<'_, M> {
    /// Registers `fd` (edge-triggered) and returns its fresh token. The fd
    /// must stay open until [`deregister`](Self::deregister).
    pub fn register(&mut self, fd: &impl AsRawFd, interest: Interest) -> io::Result<Token> {
        let token = Token(self.core.next_token);
        self.core.next_token += 1;
        let raw = fd.as_raw_fd();
        self.core
            .registry
            .register(&mut SourceFd(&raw), token, interest)?;
        Ok(token)
    }

    /// Changes the interest of an already registered fd.
    pub fn reregister(
        &mut self,
        fd: &impl AsRawFd,
        token: Token,
        interest: Interest,
    ) -> io::Result<()> {
        let raw = fd.as_raw_fd();
        self.core
            .registry
            .reregister(&mut SourceFd(&raw), token, interest)
    }

    /// Stops watching `fd`. Call before closing it.
    pub fn deregister(&mut self, fd: &impl AsRawFd) -> io::Result<()> {
        let raw = fd.as_raw_fd();
        self.core.registry.deregister(&mut SourceFd(&raw))
    }

    /// Makes [`EventLoop::run`] return after the current callback.
    pub fn quit(&mut self) {
        self.core.quit = true;
    }

    /// A handle for other threads (same as [`EventLoop::remote`]).
    pub fn remote(&self) -> RemoteHandle<M> {
        RemoteHandle {
            tx: self.core.tx.clone(),
            waker: self.core.waker.clone(),
        }
    }
}

impl<M> TaskRunner<M> for LoopCtl<'_, M> {
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn add_timer(&mut self, delay: Duration) -> TimerId {
        self.core.timers.add(Instant::now(), delay, None)
    }
    fn add_periodic_timer(&mut self, period: Duration) -> TimerId {
        self.core.timers.add(Instant::now(), period, Some(period))
    }
    fn cancel_timer(&mut self, id: TimerId) -> bool {
        self.core.timers.cancel(id)
    }
    fn post(&mut self, msg: M) {
        self.core.local.push_back(msg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    #[derive(Debug, PartialEq)]
    enum Msg {
        Remote(u32),
        Local,
    }

    #[derive(Default)]
    struct Recorder {
        log: Vec<String>,
        periodic: Option<TimerId>,
        ticks: u32,
        stream: Option<(UnixStream, Token)>,
        received: Vec<u8>,
        remote_seen: Vec<u32>,
    }

    impl Handler for Recorder {
        type Msg = Msg;
        fn on_io(&mut self, ctl: &mut LoopCtl<'_, Msg>, token: Token, ready: Ready) {
            let (s, t) = self.stream.as_mut().unwrap();
            assert_eq!(*t, token);
            assert!(ready.readable || ready.closed);
            let mut buf = [0u8; 3]; // Small on purpose: must drain in a loop.
            loop {
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => self.received.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("{e}"),
                }
            }
            if self.received == b"hello world" {
                self.log.push("io".into());
                ctl.post(Msg::Local);
            }
        }
        fn on_timer(&mut self, ctl: &mut LoopCtl<'_, Msg>, id: TimerId) {
            if Some(id) == self.periodic {
                self.ticks += 1;
                if self.ticks == 3 {
                    self.log.push("3 ticks".into());
                    assert!(ctl.cancel_timer(id));
                }
            } else {
                self.log.push("oneshot".into());
            }
            self.maybe_quit(ctl);
        }
        fn on_message(&mut self, ctl: &mut LoopCtl<'_, Msg>, msg: Msg) {
            match msg {
                Msg::Remote(n) => self.remote_seen.push(n),
                Msg::Local => self.log.push("local".into()),
            }
            self.maybe_quit(ctl);
        }
    }

    impl Recorder {
        fn maybe_quit(&mut self, ctl: &mut LoopCtl<'_, Msg>) {
            let done = self.ticks >= 3
                && self.remote_seen.len() == 100
                && self.log.iter().any(|l| l == "local")
                && self.log.iter().any(|l| l == "oneshot");
            if done {
                ctl.quit();
            }
        }
    }

    #[test]
    fn real_loop_delivers_io_messages_and_timers() {
        let mut el = EventLoop::<Msg>::new().unwrap();
        let (a, mut b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let mut rec = Recorder::default();
        {
            let mut ctl = el.ctl();
            let token = ctl.register(&a, Interest::READABLE).unwrap();
            rec.stream = Some((a, token));
            rec.periodic = Some(ctl.add_periodic_timer(Duration::from_millis(1)));
            ctl.add_timer(Duration::from_millis(2));
        }
        let remote = el.remote();
        let sender = std::thread::spawn(move || {
            for i in 0..100 {
                remote.clone().post(Msg::Remote(i)).unwrap();
            }
            b.write_all(b"hello world").unwrap();
            b
        });
        el.run(&mut rec).unwrap();
        let _b = sender.join().unwrap();
        assert_eq!(rec.remote_seen, (0..100).collect::<Vec<_>>());
        assert_eq!(rec.ticks, 3, "cancelled periodic timer fired again");
        assert_eq!(rec.received, b"hello world");
        let io_pos = rec.log.iter().position(|l| l == "io").unwrap();
        let local_pos = rec.log.iter().position(|l| l == "local").unwrap();
        assert!(
            io_pos < local_pos,
            "local post delivered before its poster ran"
        );
    }

    #[test]
    fn remote_post_fails_after_loop_dropped() {
        let el = EventLoop::<u8>::new().unwrap();
        let remote = el.remote();
        drop(el);
        assert_eq!(remote.post(1), Err(LoopGone));
    }

    /// Re-posts itself forever and arms a zero-period timer; the fd event
    /// must still get through.
    struct Spinner {
        token: Option<Token>,
        messages: u64,
        ticks: u64,
    }

    impl Handler for Spinner {
        type Msg = ();
        fn on_io(&mut self, ctl: &mut LoopCtl<'_, ()>, token: Token, _ready: Ready) {
            assert_eq!(Some(token), self.token);
            ctl.quit();
        }
        fn on_timer(&mut self, _ctl: &mut LoopCtl<'_, ()>, _id: TimerId) {
            self.ticks += 1;
        }
        fn on_message(&mut self, ctl: &mut LoopCtl<'_, ()>, _msg: ()) {
            self.messages += 1;
            ctl.post(());
        }
    }

    #[test]
    fn busy_messages_and_zero_period_timers_do_not_starve_fds() {
        let mut el = EventLoop::<()>::new().unwrap();
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut spinner = Spinner {
            token: None,
            messages: 0,
            ticks: 0,
        };
        {
            let mut ctl = el.ctl();
            spinner.token = Some(ctl.register(&a, Interest::READABLE).unwrap());
            ctl.add_periodic_timer(Duration::ZERO);
            ctl.post(());
        }
        b.write_all(b"x").unwrap();
        el.run(&mut spinner).unwrap();
        assert!(spinner.messages >= 1);
    }

    struct QuitOnEach(Vec<Token>);
    impl Handler for QuitOnEach {
        type Msg = ();
        fn on_io(&mut self, ctl: &mut LoopCtl<'_, ()>, token: Token, _ready: Ready) {
            self.0.push(token);
            ctl.quit();
        }
    }

    #[test]
    fn events_left_when_quitting_are_delivered_by_the_next_run() {
        let mut el = EventLoop::<()>::new().unwrap();
        let (a1, mut b1) = UnixStream::pair().unwrap();
        let (a2, mut b2) = UnixStream::pair().unwrap();
        let t1 = el.ctl().register(&a1, Interest::READABLE).unwrap();
        let t2 = el.ctl().register(&a2, Interest::READABLE).unwrap();
        b1.write_all(b"1").unwrap();
        b2.write_all(b"2").unwrap();
        let mut h = QuitOnEach(vec![]);
        el.run(&mut h).unwrap();
        // Both edges happened before the first wait; neither is re-armed
        // (nobody read), so the second run only works if the event was kept.
        el.run(&mut h).unwrap();
        h.0.sort();
        assert_eq!(h.0, vec![t1, t2]);
    }
}

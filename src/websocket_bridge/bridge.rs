//! The bridge's event loop: accepts websocket clients on TCP, upgrades
//! them, and relays each one's message payloads to its own upstream
//! connection and the upstream's bytes back as binary messages.
//!
//! Bounds, per connection, so one client cannot hurt another:
//! * each direction queues at most [`QUEUE_CAP`] bytes (plus one read);
//!   when a queue is full the bridge stops reading the side that fills
//!   it, so the kernel pushes back on that peer alone;
//! * a client that leaves bytes unread for `stall_timeout` is dropped;
//! * a request head must arrive within [`HANDSHAKE_TIMEOUT`], and a
//!   closing connection gets [`CLOSE_TIMEOUT`] to take its last bytes;
//! * frames over [`MAX_FRAME_PAYLOAD`] are refused (close 1009);
//! * a websocket with no traffic from either side for half of
//!   `idle_timeout` gets a ping (a browser answers it by itself); with none
//!   for all of it, it is closed (1001), so idle sockets free their slots;
//! * at most `max_conns` clients at once, and `max_conns_per_addr` from one
//!   address; more get `503`.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::upstream::{OutBuf, Target, Upstream};
use super::wire::frame::{self, Event, FrameDecoder};
use super::wire::handshake::{self, Verdict};
use crate::base::event_loop::{
    EventLoop, Handler, Interest, LoopCtl, Ready, TaskRunner, TimerId, Token,
};
use crate::{log_info, log_warn};

/// Origins the Perfetto UI is served from, as upstream allows by default.
pub const DEFAULT_ORIGINS: &[&str] = &[
    "https://ui.perfetto.dev",
    "http://localhost:10000",
    "http://127.0.0.1:10000",
];
/// Largest client frame payload. The UI sends one IPC frame (at most
/// 128 KiB, traced's own limit) per message.
pub const MAX_FRAME_PAYLOAD: usize = 1 << 20;
/// Bytes queued per direction before the bridge stops reading the source.
pub const QUEUE_CAP: usize = 1 << 20;
/// Bytes read per read call; also the largest message sent to a client.
const READ_CHUNK: usize = 64 * 1024;
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
const SWEEP_PERIOD: Duration = Duration::from_millis(500);

/// One websocket path and where it leads.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub path: &'static str,
    pub target: Target,
}

/// Everything the bridge is told.
#[derive(Clone, Debug)]
pub struct Options {
    pub listen: SocketAddr,
    pub origins: Vec<String>,
    pub endpoints: Vec<Endpoint>,
    pub max_conns: usize,
    pub max_conns_per_addr: usize,
    pub stall_timeout: Duration,
    pub idle_timeout: Duration,
}

/// Binds `opts.listen`, logs the bound address and serves forever.
pub fn run(opts: Options) -> io::Result<()> {
    let listener = TcpListener::bind(opts.listen)?;
    listener.set_nonblocking(true)?;
    let mut el = EventLoop::<()>::new()?;
    let listener_token = el.ctl().register(&listener, Interest::READABLE)?;
    el.ctl().add_periodic_timer(SWEEP_PERIOD);
    log_info!(
        "listening on {} ({})",
        listener.local_addr()?,
        opts.endpoints
            .iter()
            .map(|e| format!("{} -> {}", e.path, e.target))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut bridge = Bridge {
        opts,
        listener,
        listener_token,
        conns: Vec::new(),
        buf: Vec::new(),
    };
    el.run(&mut bridge)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading the HTTP request head.
    Handshake,
    /// Relaying.
    Open,
    /// Sending the last bytes (an HTTP error or a close frame), then gone.
    Closing,
}

struct Conn {
    client: TcpStream,
    token: Token,
    peer: SocketAddr,
    phase: Phase,
    since: Instant,
    head: Vec<u8>,
    decoder: FrameDecoder,
    upstream: Option<(Upstream, Token)>,
    to_client: OutBuf,
    to_upstream: OutBuf,
    /// Last time the client took bytes or had none waiting.
    client_progress: Instant,
    /// Last time bytes came from the client or the upstream.
    last_traffic: Instant,
    /// A ping went out since `last_traffic`.
    pinged: bool,
}

/// What the sweep does to a connection.
enum Sweep {
    Drop(&'static str),
    Ping,
    IdleClose,
}

struct Bridge {
    opts: Options,
    listener: TcpListener,
    listener_token: Token,
    /// At most `max_conns`, so a linear search is fine (and smaller than
    /// a map in the static binary).
    conns: Vec<Conn>,
    /// Read buffer shared by all connections.
    buf: Vec<u8>,
}

/// Why a connection ends, for the log (`None`: it goes on).
type Done = Option<String>;

impl Handler for Bridge {
    type Msg = ();

    fn on_io(&mut self, ctl: &mut LoopCtl<'_, ()>, token: Token, _ready: Ready) {
        if token == self.listener_token {
            return self.accept(ctl);
        }
        let owner =
            |c: &Conn| c.token == token || c.upstream.as_ref().is_some_and(|u| u.1 == token);
        let Some(i) = self.conns.iter().position(owner) else {
            return;
        };
        let mut conn = self.conns.swap_remove(i);
        match self.pump(ctl, &mut conn) {
            None => self.conns.push(conn),
            Some(why) => self.finish(ctl, conn, &why),
        }
    }

    fn on_timer(&mut self, ctl: &mut LoopCtl<'_, ()>, _id: TimerId) {
        let now = Instant::now();
        let idle = self.opts.idle_timeout;
        let mut due = Vec::new();
        for c in self.conns.iter_mut() {
            if c.to_client.is_empty() {
                c.client_progress = now;
            }
            let quiet = now - c.last_traffic;
            let what = match c.phase {
                Phase::Handshake if now - c.since > HANDSHAKE_TIMEOUT => {
                    Sweep::Drop("no request head in time")
                }
                Phase::Closing if now - c.since > CLOSE_TIMEOUT => {
                    Sweep::Drop("client did not take the close")
                }
                Phase::Open if now - c.client_progress > self.opts.stall_timeout => {
                    Sweep::Drop("client stopped reading")
                }
                Phase::Open if quiet > idle => Sweep::IdleClose,
                Phase::Open if quiet > idle / 2 && !c.pinged => Sweep::Ping,
                _ => continue,
            };
            due.push((c.token, what));
        }
        for (token, what) in due {
            let Some(i) = self.conns.iter().position(|c| c.token == token) else {
                continue;
            };
            let mut conn = self.conns.swap_remove(i);
            match what {
                Sweep::Drop(why) => {
                    log_warn!("{}: {why}; dropped", conn.peer);
                    self.finish(ctl, conn, why);
                    continue;
                }
                Sweep::Ping => {
                    conn.pinged = true;
                    frame::put_frame(conn.to_client.tail(), frame::OP_PING, b"");
                }
                Sweep::IdleClose => {
                    log_warn!(
                        "{}: no traffic for {} s; closing",
                        conn.peer,
                        idle.as_secs()
                    );
                    self.close(ctl, &mut conn, frame::CLOSE_GOING_AWAY, "no traffic");
                }
            }
            match self.pump(ctl, &mut conn) {
                None => self.conns.push(conn),
                Some(why) => self.finish(ctl, conn, &why),
            }
        }
    }
}

impl Bridge {
    fn accept(&mut self, ctl: &mut LoopCtl<'_, ()>) {
        loop {
            let (client, peer) = match self.listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: try again on the next connection.
                    log_warn!("accept: {e}");
                    return;
                }
            };
            if self.conns.len() >= self.opts.max_conns {
                log_warn!("{peer}: refused, {} clients already", self.conns.len());
                let _ = (&client).write(&handshake::error_response(
                    "503 Service Unavailable",
                    "",
                    "too many connections",
                ));
                continue;
            }
            let same_addr = self.conns.iter().filter(|c| c.peer.ip() == peer.ip());
            if same_addr.count() >= self.opts.max_conns_per_addr {
                log_warn!(
                    "{peer}: refused, {} clients from {} already",
                    self.opts.max_conns_per_addr,
                    peer.ip()
                );
                let _ = (&client).write(&handshake::error_response(
                    "503 Service Unavailable",
                    "",
                    "too many connections from this address",
                ));
                continue;
            }
            if client.set_nonblocking(true).is_err() {
                continue;
            }
            let _ = client.set_nodelay(true);
            let token = match ctl.register(&client, Interest::READABLE | Interest::WRITABLE) {
                Ok(t) => t,
                Err(e) => {
                    log_warn!("{peer}: register: {e}");
                    continue;
                }
            };
            let now = Instant::now();
            let mut conn = Conn {
                client,
                token,
                peer,
                phase: Phase::Handshake,
                since: now,
                head: Vec::new(),
                decoder: FrameDecoder::new(MAX_FRAME_PAYLOAD),
                upstream: None,
                to_client: OutBuf::default(),
                to_upstream: OutBuf::default(),
                client_progress: now,
                last_traffic: now,
                pinged: false,
            };
            // Bytes may already be there; edge-triggered, so look now.
            match self.pump(ctl, &mut conn) {
                None => self.conns.push(conn),
                Some(why) => self.finish(ctl, conn, &why),
            }
        }
    }

    /// Moves bytes every way it can until nothing moves; returns why the
    /// connection is over, if it is.
    fn pump(&mut self, ctl: &mut LoopCtl<'_, ()>, c: &mut Conn) -> Done {
        let mut buf = std::mem::take(&mut self.buf);
        buf.resize(READ_CHUNK, 0);
        let done = self.pump_with(ctl, c, &mut buf);
        self.buf = buf;
        done
    }

    fn pump_with(&mut self, ctl: &mut LoopCtl<'_, ()>, c: &mut Conn, buf: &mut [u8]) -> Done {
        loop {
            let mut moved = false;
            match c.to_client.flush(|b| (&c.client).write(b)) {
                Ok(0) => {}
                Ok(_) => {
                    moved = true;
                    c.client_progress = Instant::now();
                }
                Err(e) => return Some(format!("write to client: {e}")),
            }
            if c.phase == Phase::Closing && c.to_client.is_empty() {
                return Some("closed".into());
            }
            if let Some((up, _)) = c.upstream.as_mut() {
                match c.to_upstream.flush(|b| up.write(b)) {
                    Ok(n) => moved |= n > 0,
                    Err(e) => {
                        self.close(ctl, c, frame::CLOSE_GOING_AWAY, &format!("upstream: {e}"));
                        continue;
                    }
                }
            }
            let room = c.to_upstream.len() < QUEUE_CAP && c.to_client.len() < QUEUE_CAP;
            if c.phase != Phase::Closing && room {
                match (&c.client).read(buf) {
                    Ok(0) => return Some("client hung up".into()),
                    Ok(n) => {
                        moved = true;
                        (c.last_traffic, c.pinged) = (Instant::now(), false);
                        self.on_client_bytes(ctl, c, &buf[..n]);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => moved = true,
                    Err(e) => return Some(format!("read from client: {e}")),
                }
            }
            if c.phase == Phase::Open && c.to_client.len() < QUEUE_CAP {
                let (up, _) = c
                    .upstream
                    .as_mut()
                    .expect("open connections have an upstream");
                match up.read(buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => moved = true,
                    Ok(0) => {
                        moved = true;
                        self.close(ctl, c, frame::CLOSE_GOING_AWAY, "upstream closed");
                    }
                    Ok(n) => {
                        moved = true;
                        (c.last_traffic, c.pinged) = (Instant::now(), false);
                        frame::put_frame(c.to_client.tail(), frame::OP_BINARY, &buf[..n]);
                    }
                    Err(e) => {
                        moved = true;
                        self.close(ctl, c, frame::CLOSE_GOING_AWAY, &format!("upstream: {e}"));
                    }
                }
            }
            if !moved {
                return None;
            }
        }
    }

    /// Handles bytes from the client: the request head, then frames.
    fn on_client_bytes(&mut self, ctl: &mut LoopCtl<'_, ()>, c: &mut Conn, data: &[u8]) {
        if c.phase == Phase::Handshake {
            c.head.extend_from_slice(data);
            let (verdict, used) = match handshake::parse_request(&c.head) {
                Ok(None) => return,
                Err(e) => {
                    log_warn!("{}: bad request: {e}", c.peer);
                    return self.refuse(c, e.response());
                }
                Ok(Some((req, used))) => {
                    let paths: Vec<&str> = self.opts.endpoints.iter().map(|e| e.path).collect();
                    let v = handshake::decide(&req, &paths, &self.opts.origins);
                    if let Verdict::Refuse { why, .. } = &v {
                        log_warn!(
                            "{}: refused {} {} (origin {:?}): {why}",
                            c.peer,
                            req.method,
                            req.path,
                            req.header("origin").unwrap_or("")
                        );
                    }
                    (v, used)
                }
            };
            match verdict {
                Verdict::Refuse { response, .. } => self.refuse(c, response),
                Verdict::Upgrade { endpoint, response } => {
                    let ep = &self.opts.endpoints[endpoint];
                    let up = Upstream::connect(&ep.target).and_then(|up| {
                        let t = ctl.register(&up, Interest::READABLE | Interest::WRITABLE)?;
                        Ok((up, t))
                    });
                    let (up, token) = match up {
                        Ok(x) => x,
                        Err(e) => {
                            log_warn!("{}: {} unreachable: {e}", c.peer, ep.target);
                            let r = handshake::error_response(
                                "503 Service Unavailable",
                                "",
                                "endpoint unreachable",
                            );
                            return self.refuse(c, r);
                        }
                    };
                    log_info!("{}: websocket {} -> {}", c.peer, ep.path, ep.target);
                    c.upstream = Some((up, token));
                    c.phase = Phase::Open;
                    c.to_client.tail().extend_from_slice(&response);
                    let rest = c.head.split_off(used);
                    c.head = Vec::new();
                    c.decoder.push(&rest);
                }
            }
        } else {
            c.decoder.push(data);
        }
        if c.phase == Phase::Open {
            self.frames(ctl, c);
        }
    }

    /// Drains decoded frames.
    fn frames(&mut self, ctl: &mut LoopCtl<'_, ()>, c: &mut Conn) {
        while c.phase == Phase::Open {
            match c.decoder.next_event() {
                Ok(None) => return,
                Ok(Some(Event::Data(d))) => c.to_upstream.tail().extend_from_slice(&d),
                Ok(Some(Event::Ping(p))) => {
                    frame::put_frame(c.to_client.tail(), frame::OP_PONG, &p)
                }
                Ok(Some(Event::Pong)) => {}
                Ok(Some(Event::Close { code })) => {
                    let code = code.unwrap_or(frame::CLOSE_NORMAL);
                    self.close(ctl, c, code, "client closed");
                }
                Err(e) => {
                    log_warn!("{}: {e}", c.peer);
                    self.close(ctl, c, e.close_code(), "bad frame");
                }
            }
        }
    }

    /// Sends `response` and closes (handshake phase).
    fn refuse(&mut self, c: &mut Conn, response: Vec<u8>) {
        c.to_client.tail().extend_from_slice(&response);
        c.phase = Phase::Closing;
        c.since = Instant::now();
    }

    /// Sends a close frame with `code`, drops the upstream, and ends once
    /// the client has the frame.
    fn close(&mut self, ctl: &mut LoopCtl<'_, ()>, c: &mut Conn, code: u16, why: &str) {
        if c.phase == Phase::Closing {
            return;
        }
        log_info!("{}: closing ({why}, code {code})", c.peer);
        frame::put_close(c.to_client.tail(), code);
        c.phase = Phase::Closing;
        c.since = Instant::now();
        self.drop_upstream(ctl, c);
    }

    fn drop_upstream(&mut self, ctl: &mut LoopCtl<'_, ()>, c: &mut Conn) {
        if let Some((mut up, _)) = c.upstream.take() {
            // Messages that came before a close still go through if the
            // socket takes them now; the rest is dropped with the link.
            let _ = c.to_upstream.flush(|b| up.write(b));
            let _ = ctl.deregister(&up);
            up.shutdown();
        }
    }

    /// Forgets a connection: both sockets close.
    fn finish(&mut self, ctl: &mut LoopCtl<'_, ()>, mut c: Conn, why: &str) {
        log_info!("{}: done ({why})", c.peer);
        self.drop_upstream(ctl, &mut c);
        let _ = ctl.deregister(&c.client);
        let _ = c.client.shutdown(std::net::Shutdown::Both);
    }
}

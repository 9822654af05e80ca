//! `tracebox websocket_bridge` against the real daemon: a websocket client
//! (tungstenite, an independent implementation) records a whole session
//! through `/traced` speaking consumer IPC in binary messages, and gets
//! the same producer packets as a consumer connected to traced directly.
//! Refusals (origin, path, bad and oversized frames) and a client that
//! stops reading are checked on real sockets.

use crate::support::traced as traced_support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracebox::ipc::client::ClientReply;
use tracebox::ipc::frame::{encode_frame, FrameDecoder};
use tracebox::pb::protos::mod_IPCFrame::{BindService, InvokeMethod, OneOfmsg};
use tracebox::pb::protos::*;
use tracebox::protozero::decode::{decode_message, FieldIter};
use tracebox::protozero::{put_bytes, VecStream};
use traced_support::*;
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket};

const UI: &str = "https://ui.perfetto.dev";

fn sockets(tag: &str) -> (String, String) {
    let pid = std::process::id();
    (
        format!("@tracebox-test-wsb-p-{tag}-{pid}"),
        format!("@tracebox-test-wsb-c-{tag}-{pid}"),
    )
}

/// A running bridge on an ephemeral loopback port; its log lines are kept.
struct Bridge {
    child: Child,
    port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Bridge {
    fn start(consumer_sock: &str, env: &[(&str, &str)], args: &[&str]) -> Bridge {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tracebox"))
            .args(["websocket_bridge", "--listen", "127.0.0.1:0"])
            .args(args)
            .env("PERFETTO_CONSUMER_SOCK_NAME", consumer_sock)
            .env("TRACEBOX_LOG", "info")
            .envs(env.iter().copied())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let port = loop {
            let line = lines.next().expect("bridge exited").unwrap();
            if let Some(rest) = line.split("listening on 127.0.0.1:").nth(1) {
                break rest.split(' ').next().unwrap().parse().unwrap();
            }
        };
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for l in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(l);
            }
        });
        Bridge { child, port, log }
    }

    fn log_has(&self, text: &str) -> bool {
        self.log.lock().unwrap().iter().any(|l| l.contains(text))
    }

    /// Whether `text` reaches the log within a generous bound: a thread
    /// collects the bridge's stderr, so a line can trail the response.
    fn log_gets(&self, text: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.log_has(text) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.log_has(text)
    }
}

fn ws_connect(
    port: u16,
    path: &str,
    origin: Option<&str>,
) -> Result<WebSocket<TcpStream>, tungstenite::Error> {
    let mut req = format!("ws://127.0.0.1:{port}{path}")
        .into_client_request()
        .unwrap();
    if let Some(o) = origin {
        req.headers_mut().insert("Origin", o.parse().unwrap());
    }
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    match tungstenite::client(req, stream) {
        Ok((ws, _)) => Ok(ws),
        Err(tungstenite::HandshakeError::Failure(e)) => Err(e),
        Err(tungstenite::HandshakeError::Interrupted(_)) => {
            panic!("blocking handshake interrupted")
        }
    }
}

fn http_status(r: Result<WebSocket<TcpStream>, tungstenite::Error>) -> u16 {
    match r {
        Err(tungstenite::Error::Http(resp)) => resp.status().as_u16(),
        Err(e) => panic!("expected an HTTP refusal, got {e}"),
        Ok(_) => panic!("expected an HTTP refusal, got a websocket"),
    }
}

/// What a session needs from a consumer, over traced's socket or the bridge.
trait Consumer {
    fn start(&mut self, method: &str, args: &[u8]) -> u64;
    /// Every reply to `id`, up to the one without `has_more`.
    fn replies(&mut self, id: u64) -> Vec<ClientReply>;
    fn call(&mut self, method: &str, args: &[u8]) -> Vec<ClientReply> {
        let id = self.start(method, args);
        self.replies(id)
    }
}

/// Consumer IPC over a websocket: each frame goes out as one binary
/// message; replies are a byte stream cut into frames.
struct WsConsumer {
    ws: WebSocket<TcpStream>,
    decoder: FrameDecoder,
    next_id: u64,
    service_id: u32,
    methods: HashMap<String, u32>,
    inbox: Vec<(u64, ClientReply)>,
}

impl WsConsumer {
    fn connect(port: u16) -> WsConsumer {
        let ws = ws_connect(port, "/traced", Some(UI)).unwrap();
        let mut c = WsConsumer {
            ws,
            decoder: FrameDecoder::new(),
            next_id: 1,
            service_id: 0,
            methods: HashMap::new(),
            inbox: Vec::new(),
        };
        c.send(OneOfmsg::msg_bind_service(BindService {
            service_name: Some("ConsumerPort".into()),
        }));
        let OneOfmsg::msg_bind_service_reply(r) = c.recv().msg else {
            panic!("expected BindServiceReply")
        };
        assert_eq!(r.success, Some(true));
        c.service_id = r.service_id.unwrap();
        for m in r.methods {
            c.methods.insert(m.name.unwrap(), m.id.unwrap());
        }
        c
    }

    fn send(&mut self, msg: OneOfmsg) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let frame = IPCFrame {
            request_id: Some(id),
            msg,
            ..Default::default()
        };
        let bytes = encode_frame(&frame).unwrap();
        self.ws.send(Message::Binary(bytes.into())).unwrap();
        id
    }

    fn recv(&mut self) -> IPCFrame {
        loop {
            if let Some(f) = self.decoder.next_frame().unwrap() {
                return f;
            }
            match self.ws.read().unwrap() {
                Message::Binary(b) => self.decoder.push(&b),
                Message::Ping(_) | Message::Pong(_) => {}
                other => panic!("unexpected message {other:?}"),
            }
        }
    }
}

impl Consumer for WsConsumer {
    fn start(&mut self, method: &str, args: &[u8]) -> u64 {
        let method_id = self.methods[method];
        self.send(OneOfmsg::msg_invoke_method(InvokeMethod {
            service_id: Some(self.service_id),
            method_id: Some(method_id),
            args_proto: Some(args.to_vec()),
            drop_reply: None,
        }))
    }

    fn replies(&mut self, id: u64) -> Vec<ClientReply> {
        let mut out = Vec::new();
        loop {
            let r = if let Some(i) = self.inbox.iter().position(|(rid, _)| *rid == id) {
                self.inbox.remove(i).1
            } else {
                let f = self.recv();
                let OneOfmsg::msg_invoke_method_reply(r) = f.msg else {
                    panic!("unexpected frame {f:?}")
                };
                let reply = ClientReply {
                    request_id: f.request_id.unwrap(),
                    success: r.success == Some(true),
                    has_more: r.has_more == Some(true),
                    payload: r.reply_proto.unwrap_or_default(),
                    fd: None,
                };
                if reply.request_id != id {
                    self.inbox.push((reply.request_id, reply));
                    continue;
                }
                reply
            };
            let more = r.has_more;
            out.push(r);
            if !more {
                return out;
            }
        }
    }
}

/// Consumer IPC straight to traced's socket.
struct Direct(
    tracebox::ipc::client::BlockingClient,
    tracebox::ipc::client::BoundService,
);

impl Consumer for Direct {
    fn start(&mut self, method: &str, args: &[u8]) -> u64 {
        self.0.start_invoke(&self.1, method, args, None).unwrap()
    }
    fn replies(&mut self, id: u64) -> Vec<ClientReply> {
        let mut out = Vec::new();
        while let Some(r) = self.0.next_reply(id).unwrap() {
            let more = r.has_more;
            out.push(r);
            if !more {
                break;
            }
        }
        out
    }
}

/// One whole session with a test producer: EnableTracing, packets,
/// DisableTracing, ReadBuffers, FreeBuffers. Returns (the packets written,
/// the trace read back).
fn record(psock: &str, consumer: &mut dyn Consumer) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut prod = TestProducer::connect(psock, "test.producer", "test.ds", 512);
    let mut req = VecStream::new();
    put_bytes(&mut req, 1, &trace_config());
    let enable = consumer.start("EnableTracing", req.as_bytes());
    prod.start(512);
    let written = prod.write(60, 7);
    let disable = consumer.call("DisableTracing", &[]);
    assert!(disable.last().unwrap().success);
    let done = consumer.replies(enable);
    let done: EnableTracingResponse = decode_message(&done.last().unwrap().payload).unwrap();
    assert!(done.error.is_none(), "{:?}", done.error);
    prod.serve_until_stop();
    let packets = packets_from_replies(&consumer.call("ReadBuffers", &[]));
    assert!(consumer.call("FreeBuffers", &[]).last().unwrap().success);
    (written, packets)
}

fn trace_config_packet(packets: &[Vec<u8>]) -> Vec<u8> {
    packets
        .iter()
        .find_map(|p| {
            FieldIter::new(p)
                .find(|f| f.number == 33)
                .map(|f| f.value.to_vec())
        })
        .expect("a trace_config packet")
}

#[test]
fn ui_records_through_the_bridge_like_a_direct_consumer() {
    let (psock, csock) = sockets("direct");
    let direct_trace = {
        let _daemon = start_traced(&psock, &csock);
        let (c, s) = connect(&csock, "ConsumerPort");
        record(&psock, &mut Direct(c, s))
    };

    let (psock, csock) = sockets("ws");
    let _daemon = start_traced(&psock, &csock);
    let bridge = Bridge::start(&csock, &[], &[]);
    let mut ws = WsConsumer::connect(bridge.port);
    let (written, packets) = record(&psock, &mut ws);

    assert_eq!(producer_payloads(&packets), written);
    assert_eq!(producer_payloads(&direct_trace.1), direct_trace.0);
    assert_eq!(
        written, direct_trace.0,
        "the producer writes the same both ways"
    );
    assert_eq!(
        trace_config_packet(&packets),
        trace_config_packet(&direct_trace.1)
    );
    check_with_python(&packets, written.len());

    // Ping is answered with the same payload; close is echoed.
    ws.ws
        .send(Message::Ping(b"are you there".to_vec().into()))
        .unwrap();
    match ws.ws.read().unwrap() {
        Message::Pong(p) => assert_eq!(&p[..], b"are you there"),
        other => panic!("expected a pong, got {other:?}"),
    }
    ws.ws.close(None).unwrap();
    loop {
        match ws.ws.read() {
            Ok(_) => continue,
            Err(tungstenite::Error::ConnectionClosed) => break,
            Err(e) => panic!("close handshake: {e}"),
        }
    }
}

#[test]
fn origins_and_paths_are_checked_before_connecting() {
    let (_psock, csock) = sockets("origins");
    let _daemon = start_traced(&_psock, &csock);
    let extra = "http://board.example:8080, https://mirror.example";
    let bridge = Bridge::start(&csock, &[], &["--http-additional-cors-origins", extra]);
    let port = bridge.port;
    assert_eq!(
        http_status(ws_connect(port, "/traced", Some("https://evil.example"))),
        403
    );
    assert_eq!(http_status(ws_connect(port, "/traced", None)), 403);
    assert_eq!(http_status(ws_connect(port, "/other", Some(UI))), 404);
    assert_eq!(http_status(ws_connect(port, "/traced/x", Some(UI))), 404);
    for ok in [
        UI,
        "http://localhost:10000",
        "http://127.0.0.1:10000",
        "https://mirror.example",
    ] {
        ws_connect(port, "/traced", Some(ok)).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    ws_connect(port, "/traced", Some("HTTP://BOARD.example:8080")).unwrap();
    // A plain GET of an endpoint is not a websocket.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /traced HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 404 "), "{resp}");
    assert!(
        bridge.log_gets("origin not allowed"),
        "{:?}",
        bridge.log.lock().unwrap()
    );
}

/// Upgrades by hand so the test can send frames tungstenite would not.
fn raw_upgrade(port: u16, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Origin: {UI}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        head.push(b[0]);
    }
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    assert!(head.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
    s
}

/// Reads server frames until a close frame; returns its status code and
/// checks the bridge then closes the connection.
fn expect_close(s: &mut TcpStream) -> u16 {
    loop {
        let mut h = [0u8; 2];
        s.read_exact(&mut h).unwrap();
        assert_eq!(h[1] & 0x80, 0, "server frames are not masked");
        let len = match h[1] & 0x7f {
            126 => {
                let mut l = [0u8; 2];
                s.read_exact(&mut l).unwrap();
                u16::from_be_bytes(l) as usize
            }
            127 => {
                let mut l = [0u8; 8];
                s.read_exact(&mut l).unwrap();
                u64::from_be_bytes(l) as usize
            }
            n => n as usize,
        };
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).unwrap();
        if h[0] & 0x0f == 0x8 {
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
            assert!(rest.is_empty(), "bytes after the close frame");
            return u16::from_be_bytes([payload[0], payload[1]]);
        }
    }
}

#[test]
fn bad_and_oversized_frames_close_only_that_connection() {
    let (psock, csock) = sockets("frames");
    let _daemon = start_traced(&psock, &csock);
    let bridge = Bridge::start(&csock, &[], &[]);
    let mut good = WsConsumer::connect(bridge.port);

    let cases: [(&[u8], u16); 4] = [
        (&[0x82, 0x03, 1, 2, 3], 1002),    // not masked
        (&[0xc2, 0x80, 0, 0, 0, 0], 1002), // RSV1 set
        (&[0x80, 0x80, 0, 0, 0, 0], 1002), // stray continuation
        (&[0x82, 0xff, 0, 0, 0, 0, 0, 0x20, 0, 1, 0, 0, 0, 0], 1009), // 2 MiB + 1
    ];
    for (bytes, code) in cases {
        let mut s = raw_upgrade(bridge.port, "/traced");
        s.write_all(bytes).unwrap();
        assert_eq!(expect_close(&mut s), code, "{bytes:x?}");
    }
    // A masked, fragmented message reaches traced as one byte stream: the
    // BindService frame split over three frames with a ping in between.
    let mut s = raw_upgrade(bridge.port, "/traced");
    let bind = encode_frame(&IPCFrame {
        request_id: Some(7),
        msg: OneOfmsg::msg_bind_service(BindService {
            service_name: Some("ConsumerPort".into()),
        }),
        ..Default::default()
    })
    .unwrap();
    let mask = [9u8, 8, 7, 6];
    let masked = |first: u8, p: &[u8]| -> Vec<u8> {
        let mut f = vec![first, 0x80 | p.len() as u8];
        f.extend_from_slice(&mask);
        f.extend(p.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        f
    };
    let (a, rest) = bind.split_at(3);
    let (b, c) = rest.split_at(5);
    for f in [
        masked(0x02, a),
        masked(0x89, b"p"),
        masked(0x00, b),
        masked(0x80, c),
    ] {
        s.write_all(&f).unwrap();
    }
    let mut got = Vec::new();
    let mut decoder = FrameDecoder::new();
    let mut saw_pong = false;
    let reply = loop {
        if let Some(f) = decoder.next_frame().unwrap() {
            break f;
        }
        let mut h = [0u8; 2];
        s.read_exact(&mut h).unwrap();
        let len = match h[1] {
            126 => {
                let mut l = [0u8; 2];
                s.read_exact(&mut l).unwrap();
                u16::from_be_bytes(l) as usize
            }
            n => n as usize,
        };
        let mut p = vec![0u8; len];
        s.read_exact(&mut p).unwrap();
        match h[0] {
            0x8a => saw_pong = p == b"p",
            0x82 => {
                got.extend_from_slice(&p);
                decoder.push(&p);
            }
            x => panic!("unexpected frame type {x:#x}"),
        }
    };
    assert!(saw_pong, "the ping between fragments was answered first");
    assert_eq!(reply.request_id, Some(7));
    assert!(
        matches!(reply.msg, OneOfmsg::msg_bind_service_reply(ref r) if r.success == Some(true))
    );

    // The first connection was never disturbed.
    assert!(good.call("QueryServiceState", &[]).last().unwrap().success);
    assert!(
        bridge.log_gets("client frame not masked"),
        "{:?}",
        bridge.log.lock().unwrap()
    );
}

#[test]
fn adb_endpoint_passes_bytes_through() {
    let adb = TcpListener::bind("127.0.0.1:0").unwrap();
    let adb_addr = format!("tcp:{}", adb.local_addr().unwrap());
    let server = std::thread::spawn(move || {
        let (mut s, _) = adb.accept().unwrap();
        let mut req = [0u8; 16];
        s.read_exact(&mut req).unwrap();
        assert_eq!(&req, b"000chost:version");
        s.write_all(b"OKAY00040029").unwrap();
    });
    let bridge = Bridge::start("@unused", &[("ADB_SERVER_SOCKET", &adb_addr)], &[]);
    let mut ws = ws_connect(bridge.port, "/adb", Some(UI)).unwrap();
    // Two messages on the way in, whatever split on the way out.
    ws.send(Message::Binary(b"000chost".to_vec().into()))
        .unwrap();
    ws.send(Message::Binary(b":version".to_vec().into()))
        .unwrap();
    let mut got = Vec::new();
    while got.len() < 12 {
        match ws.read().unwrap() {
            Message::Binary(b) => got.extend_from_slice(&b),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(got, b"OKAY00040029");
    server.join().unwrap();
    // The adb server hung up: the bridge closes the websocket (1001).
    match ws.read() {
        Ok(Message::Close(Some(f))) => assert_eq!(u16::from(f.code), 1001),
        other => panic!("expected a close frame, got {other:?}"),
    }
}

#[test]
fn a_client_that_stops_reading_is_dropped_without_stalling_others() {
    // A fake adb server that writes as fast as it can to a websocket
    // client that never reads.
    let adb = TcpListener::bind("127.0.0.1:0").unwrap();
    let adb_addr = format!("tcp:{}", adb.local_addr().unwrap());
    let (blocked_tx, blocked_rx) = std::sync::mpsc::channel();
    let flood = std::thread::spawn(move || {
        let (mut s, _) = adb.accept().unwrap();
        s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
        let chunk = vec![0x5a; 64 * 1024];
        let mut sent = 0usize;
        let mut told = false;
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            match s.write(&chunk) {
                Ok(n) => sent += n,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    if !told {
                        told = true;
                        blocked_tx.send(sent).unwrap();
                    }
                }
                Err(_) => return (sent, Some(Instant::now())),
            }
        }
        (sent, None)
    });
    let (psock, csock) = sockets("stall");
    let _daemon = start_traced(&psock, &csock);
    let bridge = Bridge::start(
        &csock,
        &[("ADB_SERVER_SOCKET", &adb_addr)],
        &["--client-stall-timeout", "8"],
    );
    let _stalled = raw_upgrade(bridge.port, "/adb");
    let queued = blocked_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the bridge pushed back on the flooding server");
    assert!(
        queued < 64 << 20,
        "{queued} bytes taken for a client that reads nothing"
    );

    // Meanwhile another client records a whole trace.
    let mut ws = WsConsumer::connect(bridge.port);
    let (written, packets) = record(&psock, &mut ws);
    let recorded_at = Instant::now();
    assert_eq!(producer_payloads(&packets), written);

    // The stalled client is dropped, and its upstream with it.
    let (_, dropped_at) = flood.join().unwrap();
    let dropped_at = dropped_at.expect("the bridge never dropped the stalled client");
    assert!(
        recorded_at < dropped_at,
        "the recording waited for the stalled client"
    );
    // The log line travels through a pipe and a reader thread: give it a
    // moment to arrive.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !bridge.log_has("client stopped reading") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(bridge.log_has("client stopped reading"));
}

// Hostile clients (issue 33, defect 10): ambiguous heads, close codes a
// peer may not send, text that is not UTF-8, and idle sockets that would
// hold every slot.

/// Sends a raw request head (none if empty: a refusal at accept comes
/// unasked, and unread request bytes would turn the close into a reset);
/// returns the whole response.
fn raw_http(port: u16, head: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    resp
}

fn upgrade_head(extra: &str) -> String {
    format!(
        "GET /traced HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\n{extra}\r\n"
    )
}

#[test]
fn two_origins_or_two_keys_are_refused() {
    let (psock, csock) = sockets("dups");
    let _daemon = start_traced(&psock, &csock);
    let bridge = Bridge::start(&csock, &[], &[]);
    let key = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    let ui = format!("Origin: {UI}\r\n");
    let evil = "Origin: https://evil.example\r\n";
    for (extra, why) in [
        (format!("{ui}{evil}{key}"), "two Origin headers"),
        (format!("{evil}{ui}{key}"), "two Origin headers"),
        (format!("{ui}{ui}{key}"), "two Origin headers"),
        (
            format!("{ui}{key}Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n"),
            "two Sec-WebSocket-Key headers",
        ),
    ] {
        let resp = raw_http(bridge.port, &upgrade_head(&extra));
        assert!(resp.starts_with("HTTP/1.1 400 "), "{extra}: {resp}");
        assert!(resp.contains(why), "{extra}: {resp}");
    }
    assert!(bridge.log_gets("two Origin headers"));
}

/// A masked client frame.
fn masked(first: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [1u8, 2, 3, 4];
    assert!(payload.len() < 126);
    let mut f = vec![first, 0x80 | payload.len() as u8];
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

#[test]
fn invalid_close_codes_get_1002_and_invalid_utf8_gets_1007() {
    let (psock, csock) = sockets("codes");
    let _daemon = start_traced(&psock, &csock);
    let bridge = Bridge::start(&csock, &[], &[]);
    let close =
        |code: u16, reason: &[u8]| masked(0x88, &[&code.to_be_bytes()[..], reason].concat());
    let cases: [(Vec<u8>, u16); 7] = [
        (close(999, b""), 1002),
        (close(1005, b""), 1002),
        (close(1006, b""), 1002),
        (close(5000, b""), 1002),
        (close(1000, &[0xff, 0xfe]), 1007),
        (masked(0x81, &[b'o', b'k', 0xc3]), 1007),
        (masked(0x81, &[0xed, 0xa0, 0x80]), 1007),
    ];
    for (bytes, code) in cases {
        let mut s = raw_upgrade(bridge.port, "/traced");
        s.write_all(&bytes).unwrap();
        assert_eq!(expect_close(&mut s), code, "{bytes:x?}");
    }
    // A valid code is echoed, and valid text goes through.
    let mut s = raw_upgrade(bridge.port, "/traced");
    s.write_all(&close(4000, "fin κ".as_bytes())).unwrap();
    assert_eq!(expect_close(&mut s), 4000);
    assert!(bridge.log_gets("invalid close code"));
    assert!(bridge.log_gets("text message is not UTF-8"));
}

/// Reads one server frame: (opcode, payload).
fn read_frame(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut h = [0u8; 2];
    s.read_exact(&mut h).unwrap();
    assert!(h[1] < 126);
    let mut p = vec![0u8; h[1] as usize];
    s.read_exact(&mut p).unwrap();
    (h[0] & 0x0f, p)
}

#[test]
fn idle_websockets_are_closed_and_one_address_holds_at_most_16_slots() {
    let (psock, csock) = sockets("idle");
    let _daemon = start_traced(&psock, &csock);
    let bridge = Bridge::start(&csock, &[], &["--idle-timeout", "3"]);
    // A client that answers the bridge's pings, as a browser does.
    let mut alive = raw_upgrade(bridge.port, "/traced");
    // Fifteen more that never say anything: 16 from this address.
    let mut idle: Vec<TcpStream> = (0..15)
        .map(|_| raw_upgrade(bridge.port, "/traced"))
        .collect();
    let resp = raw_http(bridge.port, "");
    assert!(resp.starts_with("HTTP/1.1 503 "), "{resp}");
    assert!(
        resp.contains("too many connections from this address"),
        "{resp}"
    );
    // The bridge pings at half the timeout; the live client answers.
    let (op, payload) = read_frame(&mut alive);
    assert_eq!(op, 0x9, "a ping");
    alive.write_all(&masked(0x8a, &payload)).unwrap();
    // The silent ones get a ping, then the close (1001) at the timeout.
    for s in idle.iter_mut() {
        assert_eq!(expect_close(s), 1001);
    }
    assert!(bridge.log_gets("no traffic for 3 s; closing"));
    // Their slots are free again.
    let _again = raw_upgrade(bridge.port, "/traced");
    // The live one is still open: it answers its pings and gets a pong.
    alive.write_all(&masked(0x89, b"still")).unwrap();
    loop {
        let (op, payload) = read_frame(&mut alive);
        if op == 0x9 {
            alive.write_all(&masked(0x8a, &payload)).unwrap();
            continue;
        }
        assert_eq!((op, payload.as_slice()), (0xa, &b"still"[..]));
        break;
    }
}

//! Host and client in two processes over real sockets.

use crate::support::ipc_peer;

use std::io::{Read, Seek};
use std::time::Duration;

use ipc_peer::*;
use tracebox::base::event_loop::{EventLoop, Handler, LoopCtl, Ready, Token};
use tracebox::base::sock_addr::SockAddr;
use tracebox::ipc::client::{BlockingClient, BoundService, Client, ClientError, ClientEvent};

fn text(payload: &[u8]) -> &str {
    std::str::from_utf8(payload).unwrap()
}

#[test]
fn plain_calls_over_abstract_and_filesystem_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("host.sock").to_str().unwrap().to_string();
    let abs = unique_abstract("plain");
    let host = spawn_host_child(&format!("{abs},{path}"));
    for addr in [&abs, &path] {
        let (mut c, svc) = connect_bound(addr);
        assert_eq!(svc.service_id, 2, "ids follow exposure order");
        let ids: Vec<u32> = svc.methods.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, (1..=METHODS.len() as u32).collect::<Vec<_>>());
        assert_eq!(svc.method_id("Echo"), Some(1));
        let r = c.invoke(&svc, "Echo", b"hello", None).unwrap();
        assert_eq!(r.len(), 1);
        assert!(r[0].success && !r[0].has_more);
        assert_eq!(r[0].payload, b"hello");
        // The host saw our pid through SO_PEERCRED.
        let r = c.invoke(&svc, "WhoAmI", b"", None).unwrap();
        assert_eq!(text(&r[0].payload), std::process::id().to_string());
    }
    drop(host);
}

#[test]
fn streaming_reply_of_1000_frames_arrives_complete_and_in_order() {
    let addr = unique_abstract("stream");
    let _host = spawn_host_child(&addr);
    let (mut c, svc) = connect_bound(&addr);
    let replies = c.invoke(&svc, "Stream", b"1000", None).unwrap();
    assert_eq!(replies.len(), 1000);
    for (i, r) in replies.iter().enumerate() {
        assert!(r.success);
        assert_eq!(text(&r.payload), i.to_string());
        assert_eq!(r.has_more, i != 999);
    }
    // Interleaved streams on one connection are routed by request id.
    let a = c.start_invoke(&svc, "Stream", b"3", None).unwrap();
    let b = c.start_invoke(&svc, "Stream", b"2", None).unwrap();
    assert_eq!(text(&c.next_reply(b).unwrap().unwrap().payload), "0");
    assert_eq!(text(&c.next_reply(a).unwrap().unwrap().payload), "0");
    assert_eq!(text(&c.next_reply(b).unwrap().unwrap().payload), "1");
    assert!(c.next_reply(b).unwrap().is_none());
    assert_eq!(text(&c.next_reply(a).unwrap().unwrap().payload), "1");
    assert_eq!(text(&c.next_reply(a).unwrap().unwrap().payload), "2");
    assert!(c.next_reply(a).unwrap().is_none());
}

#[test]
fn memfds_cross_in_both_directions() {
    let addr = unique_abstract("fds");
    let _host = spawn_host_child(&addr);
    let (mut c, svc) = connect_bound(&addr);
    // Request with an fd: the host reads the memfd we created.
    let r = c
        .invoke(
            &svc,
            "ReadFd",
            b"",
            Some(memfd_with(b"written by the client")),
        )
        .unwrap();
    assert!(r[0].success);
    assert_eq!(text(&r[0].payload), "written by the client");
    // Pipelined: the fd reaches the call it was sent with, not the one
    // before it, even when the host reads both in one recvmsg.
    let first = c.start_invoke(&svc, "Echo", b"no fd", None).unwrap();
    let second = c
        .start_invoke(&svc, "ReadFd", b"", Some(memfd_with(b"second")))
        .unwrap();
    assert_eq!(c.next_reply(first).unwrap().unwrap().payload, b"no fd");
    assert_eq!(
        text(&c.next_reply(second).unwrap().unwrap().payload),
        "second"
    );
    // No fd: the host's handler gets None and fails the call.
    let r = c.invoke(&svc, "ReadFd", b"", None).unwrap();
    assert!(!r[0].success);
    // Reply with an fd: we read the host's memfd.
    let mut r = c
        .invoke(&svc, "SendFd", b"written by the host", None)
        .unwrap();
    let fd = r[0].fd.take().expect("reply carries an fd");
    let mut f = std::fs::File::from(fd);
    f.rewind().unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "written by the host");
}

#[test]
fn drop_reply_unknown_service_and_bad_method_ids() {
    let addr = unique_abstract("reject");
    let _host = spawn_host_child(&addr);
    let (mut c, svc) = connect_bound(&addr);
    c.invoke_no_reply(&svc, "Record", b"a", None).unwrap();
    c.invoke_no_reply(&svc, "Record", b"b", None).unwrap();
    let r = c.invoke(&svc, "GetLog", b"", None).unwrap();
    assert_eq!(text(&r[0].payload), "a,b");

    match c.bind_service("NoSuchPort") {
        Err(ClientError::UnknownService(n)) => assert_eq!(n, "NoSuchPort"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        c.invoke(&svc, "NoSuchMethod", b"", None),
        Err(ClientError::UnknownMethod(_))
    ));
    let n = METHODS.len() as u32;
    for (service_id, method_id) in [
        (svc.service_id, 0),
        (svc.service_id, n + 1),
        (99, 1),
        (0, 1),
    ] {
        let id = c
            .start_invoke_raw(service_id, method_id, b"x", None)
            .unwrap();
        let r = c.next_reply(id).unwrap().unwrap();
        assert!(
            !r.success && !r.has_more && r.payload.is_empty(),
            "{service_id}/{method_id}"
        );
        assert!(c.next_reply(id).unwrap().is_none());
    }
    // The connection is still fine.
    assert_eq!(
        c.invoke(&svc, "Echo", b"ok", None).unwrap()[0].payload,
        b"ok"
    );
}

#[test]
fn deferred_replies_and_disconnect_notifications() {
    let addr = unique_abstract("defer");
    let _host = spawn_host_child(&addr);
    let (mut a, svc) = connect_bound(&addr);
    let parked = a.start_invoke(&svc, "Park", b"", None).unwrap();
    {
        // A client that parks a call and leaves: the service is told.
        let (mut gone, svc2) = connect_bound(&addr);
        gone.start_invoke(&svc2, "Park", b"", None).unwrap();
    }
    let (mut b, _) = connect_bound(&addr);
    // Wait (without timing) until the host processed the disconnect.
    while text(&b.invoke(&svc, "Disconnects", b"", None).unwrap()[0].payload) == "0" {
        std::thread::yield_now();
    }
    b.invoke(&svc, "Release", b"", None).unwrap();
    let r = a.next_reply(parked).unwrap().unwrap();
    assert_eq!(r.payload, b"released");
    assert!(a.next_reply(parked).unwrap().is_none());
}

#[test]
fn stuck_client_is_dropped_without_blocking_others() {
    let addr = unique_abstract("stuck");
    let _host = spawn_host_child(&addr);
    let (mut stuck, svc) = connect_bound(&addr);
    let (mut other, _) = connect_bound(&addr);
    // Fill the stuck client's socket and part of its host-side queue.
    let half = (TEST_MAX_QUEUED / FLOOD_CHUNK / 2).to_string();
    stuck
        .start_invoke(&svc, "Flood", half.as_bytes(), None)
        .unwrap();
    assert_eq!(
        other.invoke(&svc, "Echo", b"still served", None).unwrap()[0].payload,
        b"still served"
    );
    // Now far more than the queue bound: the host must drop it.
    let flood = (4 * TEST_MAX_QUEUED / FLOOD_CHUNK).to_string();
    let flood_id = stuck
        .start_invoke(&svc, "Flood", flood.as_bytes(), None)
        .unwrap();
    assert_eq!(
        other.invoke(&svc, "Echo", b"still served", None).unwrap()[0].payload,
        b"still served"
    );
    // That answer does not mean the host handled the flood: it may serve
    // `other` first (epoll order; reading a reply queues an EPOLLOUT edge
    // for that connection). Wait until both floods were handled, so the
    // stuck client reads nothing while the host fills its queue.
    wait_floods_handled(&mut other, &svc, 2);
    assert_ne!(
        text(&other.invoke(&svc, "Disconnects", b"", None).unwrap()[0].payload),
        "0",
        "the host handled a flood far over the queue bound without dropping the client"
    );
    // The stuck client reads what was delivered before the cut, then EOF.
    let mut got = 0;
    let err = loop {
        match stuck.next_reply(flood_id) {
            Ok(Some(_)) => got += 1,
            Ok(None) => panic!("stream completed; the client was not dropped"),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, ClientError::Disconnected), "{err}");
    assert!(got < 4 * TEST_MAX_QUEUED / FLOOD_CHUNK);
    assert_ne!(
        text(&other.invoke(&svc, "Disconnects", b"", None).unwrap()[0].payload),
        "0"
    );
}

/// Polls the host until it has handled `n` Flood calls (a generous bound
/// only turns a hang into a message).
fn wait_floods_handled(c: &mut BlockingClient, svc: &BoundService, n: u32) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let r = c.invoke(svc, "FloodsHandled", b"", None).unwrap();
        if text(&r[0].payload).parse::<u32>().unwrap() >= n {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the host did not handle {n} Flood calls in 60 s"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn peer_credentials_name_the_child_process() {
    let addr = unique_abstract("cred");
    let _host = ThreadHost::start(vec![addr.clone()]);
    let mut child = ChildPeer::spawn("whoami-client", &addr);
    let seen = child.read_line_with("PID ");
    assert_eq!(seen, child.id().to_string());
    assert_eq!(child.read_line_with("FD "), "from-child");
    assert!(child.child.wait().unwrap().success());
}

/// The event-loop client against a host in another process.
#[derive(Default)]
struct AsyncApp {
    client: Option<Client>,
    service_id: u32,
    echo: Option<u64>,
    stream: Option<u64>,
    streamed: Vec<String>,
    echoed: Option<Vec<u8>>,
}

impl Handler for AsyncApp {
    type Msg = ();
    fn on_io(&mut self, ctl: &mut LoopCtl<'_, ()>, token: Token, ready: Ready) {
        let client = self.client.as_mut().unwrap();
        assert_eq!(token, client.token());
        let mut events = Vec::new();
        client.on_io(ctl, ready, &mut events);
        for ev in events {
            match ev {
                ClientEvent::Bound {
                    service: Some(s), ..
                } => {
                    self.service_id = s.service_id;
                    let echo = s.method_id("Echo").unwrap();
                    let stream = s.method_id("Stream").unwrap();
                    self.echo = Some(
                        client
                            .invoke(s.service_id, echo, b"async", None, false)
                            .unwrap(),
                    );
                    self.stream = Some(
                        client
                            .invoke(s.service_id, stream, b"5", None, false)
                            .unwrap(),
                    );
                }
                ClientEvent::Reply(r) if Some(r.request_id) == self.echo => {
                    self.echoed = Some(r.payload)
                }
                ClientEvent::Reply(r) if Some(r.request_id) == self.stream => {
                    self.streamed.push(String::from_utf8(r.payload).unwrap());
                    if !r.has_more {
                        ctl.quit();
                    }
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}

#[test]
fn event_loop_client_binds_calls_and_streams() {
    let addr = unique_abstract("async");
    let host = spawn_host_child(&addr);
    let mut el = EventLoop::<()>::new().unwrap();
    let mut app = AsyncApp::default();
    let mut client = Client::connect(&mut el.ctl(), &SockAddr::parse(&addr).unwrap()).unwrap();
    assert_eq!(
        client.bind_service(SERVICE).unwrap(),
        1,
        "request ids start at 1"
    );
    app.client = Some(client);
    el.run(&mut app).unwrap();
    assert_eq!(app.echoed.as_deref(), Some(&b"async"[..]));
    assert_eq!(app.streamed, ["0", "1", "2", "3", "4"]);
    assert_eq!(app.service_id, 2);

    // Host goes away: the client reports Disconnected once.
    drop(host);
    struct WaitGone(Client, bool);
    impl Handler for WaitGone {
        type Msg = ();
        fn on_io(&mut self, ctl: &mut LoopCtl<'_, ()>, _t: Token, ready: Ready) {
            let mut events = Vec::new();
            self.0.on_io(ctl, ready, &mut events);
            if events
                .iter()
                .any(|e| matches!(e, ClientEvent::Disconnected))
            {
                self.1 = true;
                ctl.quit();
            }
        }
    }
    let mut w = WaitGone(app.client.take().unwrap(), false);
    el.run(&mut w).unwrap();
    assert!(w.1 && !w.0.is_connected());
    assert!(matches!(
        w.0.bind_service(SERVICE),
        Err(ClientError::Disconnected)
    ));
}

#[test]
fn blocking_client_times_out_on_a_silent_host() {
    let addr = unique_abstract("timeout");
    let _host = spawn_host_child(&addr);
    let (mut c, svc) = connect_bound(&addr);
    c.set_timeout(Some(Duration::from_millis(20)));
    let parked = c.start_invoke(&svc, "Park", b"", None).unwrap();
    assert!(matches!(c.next_reply(parked), Err(ClientError::TimedOut)));
    let _ = BlockingClient::connect(&SockAddr::parse(&addr).unwrap()).unwrap();
}

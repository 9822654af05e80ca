//! The `traced` daemon: two IPC hosts (producer sockets, consumer socket)
//! around the tracing service core, on one event loop.

use std::io;
use std::time::Duration;

use crate::base::event_loop::{EventLoop, Handler, LoopCtl, Ready, TaskRunner, TimerId, Token};
use crate::base::sock_addr::SockAddr;
use crate::base::unix_socket::UnixListener;
use crate::ipc::default_sockets::{
    adopt_android_socket, consumer_socket_name, producer_socket_names,
};
use crate::ipc::host::Host;
use crate::schema::services::{CONSUMER_PORT_METHODS, PRODUCER_PORT_METHODS, RELAY_PORT_METHODS};
use crate::tracing::ipc::{ConsumerPort, ProducerPort, TracedState};

mod socket_permissions;

pub use socket_permissions::{apply as set_socket_file_permissions, SocketPermissions};

/// Options of the daemon (from the command line).
#[derive(Debug, Default, Clone)]
pub struct TracedOptions {
    pub socket_permissions: Option<SocketPermissions>,
    /// Autostart: exit once idle (see [`IdleExit`]).
    pub exit_when_idle: bool,
    /// `--enable-relay-endpoint`: RelayPort on the producer sockets.
    pub enable_relay_endpoint: bool,
    /// `--enable-relay-endpoint-on SOCKET`: the same, naming producer
    /// sockets (each must be one of them).
    pub relay_endpoint_on: Vec<String>,
    /// `--relay-commit-period-ms`: how often relayed producers commit.
    pub relay_commit_period_ms: Option<u32>,
}

/// How long a traced started for a client waits for its first consumer.
const FIRST_CONSUMER_WAIT: Duration = Duration::from_secs(10);
/// How long idleness must last before an autostarted traced exits (so a
/// back-to-back recording can still find it).
const IDLE_LINGER: Duration = Duration::from_millis(300);

/// An autostarted traced exits once idle: no consumer connected and no
/// tracing session (attached or detached) left, for [`IDLE_LINGER`]. It
/// stops accepting before it stops serving, so a client either binds a
/// live service or fails to connect and starts a fresh one; its producers
/// (traced_probes started with `--exit-with-traced`) see the connection
/// close, restore ftrace and exit.
struct IdleExit {
    timer: Option<TimerId>,
}

/// Socket file modes without `--set-socket-permissions`.
pub const DEFAULT_PRODUCER_MODE: u32 = 0o666;
pub const DEFAULT_CONSUMER_MODE: u32 = 0o600;

/// Send-queue bound per consumer connection (ReadBuffers is streamed at
/// the consumer's pace, so little more than one read step is ever queued).
const MAX_CONSUMER_QUEUED_BYTES: usize = 16 << 20;
/// ... and by all consumers together (256 of them would be 4 GiB): one
/// whose reply does not fit is dropped as one that does not read.
const MAX_CONSUMERS_QUEUED_BYTES: usize = 64 << 20;
/// Consumers connected at once, in all and per uid (producers: the host's
/// defaults).
const MAX_CONSUMERS: usize = 256;
const MAX_CONSUMERS_PER_UID: usize = 128;

struct TracedApp {
    producer_host: Host,
    consumer_host: Host,
    state: TracedState,
    /// The loop timer armed for the core's next deadline.
    timer: Option<(u64, TimerId)>,
    idle_exit: Option<IdleExit>,
    /// The producer host's `clients_dropped_identity` already reported.
    identity_drops: u64,
}

impl TracedApp {
    fn is_idle(&self) -> bool {
        self.consumer_host.client_count() == 0 && self.state.core.session_ids().is_empty()
    }

    /// Arms the idle timer when idle, cancels it when not. Until the first
    /// consumer connects, the timer armed at start runs as it is.
    fn check_idle(&mut self, ctl: &mut LoopCtl<'_, ()>) {
        let idle = self.is_idle();
        let Some(ie) = self.idle_exit.as_mut() else {
            return;
        };
        if !idle {
            if let Some(t) = ie.timer.take() {
                ctl.cancel_timer(t);
            }
        } else if ie.timer.is_none() {
            ie.timer = Some(ctl.add_timer(IDLE_LINGER));
        }
    }

    fn on_idle_timer(&mut self, ctl: &mut LoopCtl<'_, ()>) {
        if let Some(ie) = self.idle_exit.as_mut() {
            ie.timer = None;
        }
        if !self.is_idle() {
            return;
        }
        crate::log_info!("idle: no consumer and no session left; exiting");
        self.consumer_host.close_listeners(ctl);
        self.producer_host.close_listeners(ctl);
        ctl.quit();
    }

    /// Relay connections the producer host dropped for their identity
    /// since last time: counted in the sessions' traces.
    fn note_identity_drops(&mut self) {
        let dropped = self.producer_host.stats().clients_dropped_identity;
        if dropped > self.identity_drops {
            let n = dropped - self.identity_drops;
            self.identity_drops = dropped;
            let now = TracedState::now();
            self.state.core.note_relay_connections_dropped(now, n);
        }
    }

    /// After every event: route core outputs, re-arm the deadline timer.
    fn after_event(&mut self, ctl: &mut LoopCtl<'_, ()>) {
        self.check_idle(ctl);
        self.state
            .dispatch(&mut self.producer_host, &mut self.consumer_host);
        // Continue ReadBuffers streams (also woken by the consumer socket
        // becoming writable), then route what reading produced.
        self.state.pump_reads(&mut self.consumer_host);
        self.state
            .dispatch(&mut self.producer_host, &mut self.consumer_host);
        let Some(deadline) = self.state.core.next_deadline() else {
            return;
        };
        if let Some((armed, id)) = self.timer {
            if armed <= deadline {
                return;
            }
            ctl.cancel_timer(id);
        }
        let delay = deadline.saturating_sub(TracedState::now());
        let id = ctl.add_timer(Duration::from_nanos(delay));
        self.timer = Some((deadline, id));
    }
}

impl Handler for TracedApp {
    type Msg = ();

    fn on_io(&mut self, ctl: &mut LoopCtl<'_, ()>, token: Token, ready: Ready) {
        if self.producer_host.owns(token) {
            self.producer_host
                .on_io(ctl, token, ready, &mut ProducerPort(&mut self.state));
            self.note_identity_drops();
        } else if self.consumer_host.owns(token) {
            self.consumer_host
                .on_io(ctl, token, ready, &mut ConsumerPort(&mut self.state));
        }
        self.after_event(ctl);
    }

    fn on_timer(&mut self, ctl: &mut LoopCtl<'_, ()>, id: TimerId) {
        if self
            .producer_host
            .on_timer(ctl, id, &mut ProducerPort(&mut self.state))
        {
            self.note_identity_drops();
            return self.after_event(ctl);
        }
        if self
            .idle_exit
            .as_ref()
            .is_some_and(|ie| ie.timer == Some(id))
        {
            return self.on_idle_timer(ctl);
        }
        if self.timer.is_some_and(|(_, t)| t == id) {
            self.timer = None;
        }
        self.state.core.on_timer(TracedState::now());
        self.after_event(ctl);
    }

    fn on_message(&mut self, ctl: &mut LoopCtl<'_, ()>, _msg: ()) {
        ctl.quit();
    }
}

fn listen_all(
    host: &mut Host,
    ctl: &mut LoopCtl<'_, ()>,
    android_name: &str,
    names: &[String],
    group: Option<&str>,
    mode: u32,
) -> io::Result<()> {
    if let Some(inherited) = adopt_android_socket(android_name) {
        return host.add_listener(ctl, inherited?);
    }
    for name in names {
        let addr = SockAddr::parse(name).map_err(|e| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("socket {name:?}: {e}"))
        })?;
        let listener = UnixListener::bind(&addr)?;
        if let SockAddr::Path(p) = &addr {
            socket_permissions::apply(p, group, mode)?;
        }
        host.add_listener(ctl, listener)?;
    }
    Ok(())
}

/// Binds the sockets, signals readiness (`TRACED_NOTIFY_FD`), runs forever.
/// `ready` is called once listening (e.g. to report to a --background
/// parent).
pub fn run(opts: &TracedOptions, ready: impl FnOnce()) -> io::Result<()> {
    crate::base::sys::return_large_frees_to_os();
    let mut state = TracedState::new(nix::unistd::geteuid().as_raw());
    if let Some(ms) = opts.relay_commit_period_ms {
        state
            .core
            .set_relay_commit_period_ms(ms)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    }
    let mut el = EventLoop::<()>::new()?;
    crate::base::sys::ignore_sigxfsz()?;
    let mut producer_host = Host::new();
    producer_host.expose_service("ProducerPort", PRODUCER_PORT_METHODS);
    let producer_names = producer_socket_names();
    if let Some(bad) = opts
        .relay_endpoint_on
        .iter()
        .find(|n| !producer_names.contains(n))
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "--enable-relay-endpoint-on {bad}: not one of the producer sockets {producer_names:?}"
            ),
        ));
    }
    // One host serves all producer sockets; RelayPort answers only
    // connections that named their machine, which only TCP and vsock
    // peers can do, so exposing it host-wide admits no local caller.
    let relay_service = (opts.enable_relay_endpoint || !opts.relay_endpoint_on.is_empty())
        .then(|| producer_host.expose_service("RelayPort", RELAY_PORT_METHODS));
    let mut consumer_host = Host::new();
    consumer_host.expose_service("ConsumerPort", CONSUMER_PORT_METHODS);
    consumer_host.set_max_queued_bytes(MAX_CONSUMER_QUEUED_BYTES);
    consumer_host.set_max_total_queued_bytes(MAX_CONSUMERS_QUEUED_BYTES);
    consumer_host.set_client_limits(MAX_CONSUMERS, MAX_CONSUMERS_PER_UID);
    let perms = opts.socket_permissions.as_ref();
    {
        let mut ctl = el.ctl();
        // Without --set-socket-permissions: any local user may produce
        // (the service stamps the trusted fields), only our user consumes.
        listen_all(
            &mut producer_host,
            &mut ctl,
            "traced_producer",
            &producer_names,
            perms.map(|p| p.producer_group.as_str()),
            perms.map_or(DEFAULT_PRODUCER_MODE, |p| p.producer_mode),
        )?;
        listen_all(
            &mut consumer_host,
            &mut ctl,
            "traced_consumer",
            &[consumer_socket_name()],
            perms.map(|p| p.consumer_group.as_str()),
            perms.map_or(DEFAULT_CONSUMER_MODE, |p| p.consumer_mode),
        )?;
    }
    let mut app = TracedApp {
        producer_host,
        consumer_host,
        state,
        timer: None,
        idle_exit: None,
        identity_drops: 0,
    };
    app.state.relay_service = relay_service;
    if opts.exit_when_idle {
        // Until the first consumer: the timer fires once, after the wait.
        let mut ctl = el.ctl();
        app.idle_exit = Some(IdleExit {
            timer: Some(ctl.add_timer(FIRST_CONSUMER_WAIT)),
        });
    }
    crate::base::child_process::notify_ready("TRACED_NOTIFY_FD");
    ready();
    el.run(&mut app)
}

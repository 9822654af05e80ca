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
use crate::schema::services::{CONSUMER_PORT_METHODS, PRODUCER_PORT_METHODS};
use crate::tracing::ipc::{ConsumerPort, ProducerPort, TracedState};

mod socket_permissions;

pub use socket_permissions::SocketPermissions;

/// Options of the daemon (from the command line).
#[derive(Debug, Default, Clone)]
pub struct TracedOptions {
    pub socket_permissions: Option<SocketPermissions>,
}

/// Socket file modes without `--set-socket-permissions`.
pub const DEFAULT_PRODUCER_MODE: u32 = 0o666;
pub const DEFAULT_CONSUMER_MODE: u32 = 0o600;

/// Send-queue bound per consumer connection (ReadBuffers is streamed at
/// the consumer's pace, so little more than one read step is ever queued).
const MAX_CONSUMER_QUEUED_BYTES: usize = 16 << 20;

struct TracedApp {
    producer_host: Host,
    consumer_host: Host,
    state: TracedState,
    /// The loop timer armed for the core's next deadline.
    timer: Option<(u64, TimerId)>,
}

impl TracedApp {
    /// After every event: route core outputs, re-arm the deadline timer.
    fn after_event(&mut self, ctl: &mut LoopCtl<'_, ()>) {
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
        } else if self.consumer_host.owns(token) {
            self.consumer_host
                .on_io(ctl, token, ready, &mut ConsumerPort(&mut self.state));
        }
        self.after_event(ctl);
    }

    fn on_timer(&mut self, ctl: &mut LoopCtl<'_, ()>, id: TimerId) {
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
    let mut el = EventLoop::<()>::new()?;
    let mut producer_host = Host::new();
    producer_host.expose_service("ProducerPort", PRODUCER_PORT_METHODS);
    let mut consumer_host = Host::new();
    consumer_host.expose_service("ConsumerPort", CONSUMER_PORT_METHODS);
    consumer_host.set_max_queued_bytes(MAX_CONSUMER_QUEUED_BYTES);
    let perms = opts.socket_permissions.as_ref();
    {
        let mut ctl = el.ctl();
        // Without --set-socket-permissions: any local user may produce
        // (the service stamps the trusted fields), only our user consumes.
        listen_all(
            &mut producer_host,
            &mut ctl,
            "traced_producer",
            &producer_socket_names(),
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
    let uid = nix::unistd::geteuid().as_raw();
    let mut app = TracedApp {
        producer_host,
        consumer_host,
        state: TracedState::new(uid),
        timer: None,
    };
    crate::base::child_process::notify_ready("TRACED_NOTIFY_FD");
    ready();
    el.run(&mut app)
}

//! Glue between the IPC hosts and the sans-IO service core: which client
//! is which producer/consumer, pending deferred replies, SMB fds, output
//! files, and turning core [`Output`]s into IPC replies and file writes.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;

use crate::base::shm::Shm;
use crate::ipc::host::{ClientId, Reply, ReplySink, ReplyTo};
use crate::log_warn;
use crate::protozero::{put_bytes, put_str, put_varint, VecStream};
use crate::tracing::service::types::*;
use crate::tracing::service::TracingService;

use super::env::{boot_time_ns, RealEnv, SmbTable};

/// A producer connection.
#[derive(Default)]
pub struct ProducerConn {
    pub id: Option<ProducerId>,
    /// The GetAsyncCommand stream, once the producer opened it.
    pub async_reply: Option<ReplyTo>,
    /// Commands produced before the stream was open.
    pub queued: Vec<ProducerCommand>,
    /// A producer-provided SMB (kept mapped for the connection's life).
    pub provided_smb: Option<Shm>,
}

/// A consumer connection.
pub struct ConsumerConn {
    pub id: ConsumerId,
    /// The deferred EnableTracing reply.
    pub enable_reply: Option<ReplyTo>,
    pub observe_reply: Option<ReplyTo>,
}

pub struct TracedState {
    pub core: TracingService,
    pub smbs: SmbTable,
    pub producers: HashMap<ClientId, ProducerConn>,
    pub producer_clients: BTreeMap<ProducerId, ClientId>,
    pub consumers: HashMap<ClientId, ConsumerConn>,
    pub consumer_clients: BTreeMap<ConsumerId, ClientId>,
    /// Deferred Flush / CloneSession replies by token.
    pub pending: BTreeMap<RequestToken, ReplyTo>,
    next_token: RequestToken,
    pub files: BTreeMap<SessionId, File>,
}

impl TracedState {
    pub fn new(service_uid: u32) -> TracedState {
        let smbs = SmbTable::default();
        let env = RealEnv::new(smbs.clone());
        TracedState {
            core: TracingService::new(Box::new(env), service_uid),
            smbs,
            producers: HashMap::new(),
            producer_clients: BTreeMap::new(),
            consumers: HashMap::new(),
            consumer_clients: BTreeMap::new(),
            pending: BTreeMap::new(),
            next_token: 1,
            files: BTreeMap::new(),
        }
    }

    pub fn now() -> u64 {
        boot_time_ns()
    }

    pub fn park(&mut self, to: ReplyTo) -> RequestToken {
        let t = self.next_token;
        self.next_token += 1;
        self.pending.insert(t, to);
        t
    }

    /// Sends one command on the producer's stream, or queues it.
    pub fn send_command(
        &mut self,
        producer: ProducerId,
        cmd: ProducerCommand,
        out: &mut dyn ReplySink,
    ) {
        let Some(client) = self.producer_clients.get(&producer).copied() else {
            return;
        };
        let Some(conn) = self.producers.get_mut(&client) else {
            return;
        };
        let Some(to) = conn.async_reply else {
            conn.queued.push(cmd);
            return;
        };
        let mut reply = Reply::more(cmd.encode());
        if let ProducerCommand::SetupTracing {
            service_created_smb: true,
            ..
        } = cmd
        {
            match self
                .smbs
                .borrow()
                .get(&producer)
                .map(|s| s.fd().try_clone_to_owned())
            {
                Some(Ok(fd)) => reply = reply.with_fd(fd),
                _ => log_warn!("traced: no SMB fd for producer {producer}"),
            }
        }
        out.reply(&to, reply);
    }

    /// Routes everything the core produced.
    pub fn dispatch(&mut self, producers: &mut dyn ReplySink, consumers: &mut dyn ReplySink) {
        for o in self.core.take_outputs() {
            match o {
                Output::ProducerCommand { producer, cmd } => {
                    self.send_command(producer, cmd, producers)
                }
                Output::TracingDisabled { consumer, error } => {
                    let Some(conn) = self.consumer_conn(consumer) else {
                        continue;
                    };
                    let Some(to) = conn.enable_reply.take() else {
                        continue;
                    };
                    let mut s = VecStream::new();
                    put_varint(&mut s, 1, 1); // disabled
                    if let Some(e) = error {
                        put_str(&mut s, 3, &e);
                    }
                    consumers.reply(&to, Reply::ok(s.into_bytes()));
                }
                Output::FlushResult { token, success, .. } => {
                    if let Some(to) = self.pending.remove(&token) {
                        consumers.reply(
                            &to,
                            if success {
                                Reply::ok(Vec::new())
                            } else {
                                Reply::fail()
                            },
                        );
                    }
                }
                Output::CloneResult { token, result, .. } => {
                    if let Some(to) = self.pending.remove(&token) {
                        consumers.reply(&to, Reply::ok(encode_clone_result(&result)));
                    }
                }
                Output::WriteToFile { session, data } => {
                    if let Some(f) = self.files.get_mut(&session) {
                        if let Err(e) = f.write_all(&data) {
                            log_warn!("traced: writing the trace file failed: {e}");
                        }
                    }
                }
                Output::CloseFile { session } => {
                    if let Some(f) = self.files.remove(&session) {
                        let _ = f.sync_data();
                    }
                }
                Output::ObservableEvents { consumer, events } => {
                    let Some(to) = self.consumer_conn(consumer).and_then(|c| c.observe_reply)
                    else {
                        continue;
                    };
                    let mut s = VecStream::new();
                    put_bytes(&mut s, 1, &events);
                    consumers.reply(&to, Reply::more(s.into_bytes()));
                }
            }
        }
    }

    fn consumer_conn(&mut self, consumer: ConsumerId) -> Option<&mut ConsumerConn> {
        let client = self.consumer_clients.get(&consumer)?;
        self.consumers.get_mut(client)
    }

    pub fn producer_gone(&mut self, client: ClientId) {
        let Some(conn) = self.producers.remove(&client) else {
            return;
        };
        if let Some(id) = conn.id {
            self.core.disconnect_producer(Self::now(), id);
            self.producer_clients.remove(&id);
            self.smbs.borrow_mut().remove(&id);
        }
    }

    pub fn consumer_gone(&mut self, client: ClientId) {
        let Some(conn) = self.consumers.remove(&client) else {
            return;
        };
        self.consumer_clients.remove(&conn.id);
        self.core.disconnect_consumer(Self::now(), conn.id);
    }
}

fn encode_clone_result(r: &Result<CloneResult, String>) -> Vec<u8> {
    let mut s = VecStream::new();
    match r {
        Ok(c) => {
            put_varint(&mut s, 1, 1);
            put_varint(&mut s, 3, c.uuid_msb as u64);
            put_varint(&mut s, 4, c.uuid_lsb as u64);
            put_varint(&mut s, 5, c.was_write_into_file as u64);
        }
        Err(e) => {
            put_varint(&mut s, 1, 0);
            put_str(&mut s, 2, e);
        }
    }
    s.into_bytes()
}

//! Shared by the ftrace tests: a PacketWriter that keeps each finished
//! packet as bytes, for decoding with pb-rs.

#![allow(dead_code)]

use tracebox::protozero::VecStream;
use tracebox::traced_probes::ftrace::parse::bundle::PacketWriter;

#[derive(Default)]
pub struct Packets {
    pub done: Vec<Vec<u8>>,
    pub cur: Option<VecStream>,
}

impl PacketWriter for Packets {
    type Stream = VecStream;
    fn new_packet(&mut self) {
        self.finish_packet();
        self.cur = Some(VecStream::new());
    }
    fn stream(&mut self) -> &mut VecStream {
        self.cur.as_mut().unwrap()
    }
    fn finish_packet(&mut self) {
        if let Some(s) = self.cur.take() {
            self.done.push(s.into_bytes());
        }
    }
}

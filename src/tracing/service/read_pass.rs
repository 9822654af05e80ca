//! Reading a session: service packets first, then validated buffer
//! contents with the trusted trailer, then trace stats; delivered as
//! ReadBuffers responses (encoded by [`FrameWriter`] straight from the
//! buffer's bytes) or as `Trace`-framed bytes for write_into_file.

use crate::pb::protos::mod_TraceConfig::mod_TriggerConfig::TriggerMode;
use crate::pb::protos::mod_TraceConfig::FFlushMode;
use crate::pb::protos::ReadBuffersResponse;
use crate::protozero::encode_varint;

use super::compress;
use super::config_validation::trigger_mode;
use super::filter_sink::FilterSink;
use super::flush::FlushOrigin;
use super::packet_validator::validate_packet;
use super::read_frames::{CollectFrames, FrameSink, FrameWriter};
use super::service::TracingService;
use super::service_packets as sp;
use super::session::{event, SessionState};
use super::timers::{ms, Timer};
use super::trace_buffer::{PacketInfo, TracePacket};
use super::trusted_trailer::TrustedTrailer;
use super::types::*;

pub use super::read_frames::MAX_READ_FRAME;

/// Packet bytes per pass before yielding (IPC / file), as upstream.
const IPC_PASS_BYTES: usize = 32 * 1024;
const FILE_PASS_BYTES: usize = 1024 * 1024;
const MAX_PENDING_SNAPSHOTS: usize = 16;

/// Where a read pass delivers packets.
pub(super) trait PacketSink {
    /// One packet: `body`, then `trailer` (empty for service packets).
    /// Returns false to end the pass early (more data stays readable).
    fn packet(&mut self, body: &TracePacket<'_>, trailer: &[u8]) -> bool;
    /// The session buffer (index) the next packets come from; None for
    /// service packets.
    fn set_buffer(&mut self, _index: Option<usize>) {}
    /// A rotation's routing of packets to the new file, lent to a sink
    /// that wraps this one (deflate routes before it compresses).
    fn divert(&mut self) -> Option<&mut Option<super::rotate_divert::Divert>> {
        None
    }
    /// Packets held at the last cut, handed to a sink that wraps this one
    /// (deflate compresses them with the rest of its pass).
    fn take_lead(&mut self) -> Vec<u8> {
        Vec::new()
    }
}

/// Feeds a [`FrameWriter`]; stops the pass when the sink asked to pause.
struct ToFrames<'a> {
    writer: &'a mut FrameWriter,
    sink: &'a mut dyn FrameSink,
    bytes: usize,
}

impl PacketSink for ToFrames<'_> {
    fn packet(&mut self, body: &TracePacket<'_>, trailer: &[u8]) -> bool {
        self.bytes += body.size() + trailer.len();
        self.writer.push(body, trailer, self.sink);
        !self.writer.is_paused()
    }
}

/// `Trace`-framed packets for write_into_file, up to `max` bytes in all
/// (0 = no limit): the first packet that would cross it and every later
/// one of the pass are dropped.
struct ToFile {
    data: Vec<u8>,
    written: u64,
    max: u64,
    crossed: bool,
    /// A rotation's old-file pass: packets for the new file go here.
    divert: Option<super::rotate_divert::Divert>,
    /// Packets held at the last cut, written before the first buffer's.
    lead: Vec<u8>,
}

impl PacketSink for ToFile {
    fn packet(&mut self, body: &TracePacket<'_>, trailer: &[u8]) -> bool {
        let len = body.size() + trailer.len();
        let mut v = [0u8; 10];
        let n = encode_varint(len as u64, &mut v);
        if let Some(d) = self.divert.as_mut() {
            let slices: Vec<&[u8]> = body.slices().collect();
            let before = self.data.len();
            let route = d.route(&slices, trailer, &mut self.data);
            self.written += (self.data.len() - before) as u64;
            if let super::rotate_divert::Route::Hold(i) = route {
                let held = d.held_mut(i);
                held.push(0x0a);
                held.extend_from_slice(&v[..n]);
                slices.iter().for_each(|s| held.extend_from_slice(s));
                held.extend_from_slice(trailer);
                return true;
            }
        }
        let framed = (1 + n + len) as u64;
        if self.crossed || (self.max > 0 && self.written + framed > self.max) {
            self.crossed = true;
            return true;
        }
        self.written += framed;
        self.data.push(0x0a);
        self.data.extend_from_slice(&v[..n]);
        body.slices()
            .for_each(|s| crate::mem::skew_copy::extend_bytes(&mut self.data, s));
        self.data.extend_from_slice(trailer);
        true
    }

    fn divert(&mut self) -> Option<&mut Option<super::rotate_divert::Divert>> {
        Some(&mut self.divert)
    }

    fn take_lead(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.lead)
    }

    fn set_buffer(&mut self, index: Option<usize>) {
        if index.is_some() && !self.lead.is_empty() {
            self.written += self.lead.len() as u64;
            self.data.append(&mut self.lead);
        }
    }
}

/// Hands a service packet (one contiguous message) to `sink`.
fn emit_bytes(sink: &mut dyn PacketSink, bytes: &[u8]) {
    let ranges = [(0, bytes.len())];
    sink.packet(&TracePacket::from_ranges(bytes, &ranges), &[]);
}

impl TracingService {
    /// ReadBuffers: everything readable now, packed in responses to send in
    /// order (`has_more` on all but the last). Never empty.
    pub fn read_buffers(
        &mut self,
        now: u64,
        consumer: ConsumerId,
    ) -> Result<Vec<ReadBuffersResponse>, String> {
        let mut writer = FrameWriter::new();
        let mut sink = CollectFrames::default();
        while !self.read_buffers_stream(now, consumer, &mut writer, &mut sink, usize::MAX)? {}
        Ok(sink.frames)
    }

    /// One step of a streamed ReadBuffers: read passes, encoding packets
    /// into `writer`, which hands full responses to `sink`, until about
    /// `max_bytes` of packets were read, the sink asked to pause, or
    /// nothing is left. Returns true once the last response (the one
    /// without `has_more`) went to the sink; otherwise call again later
    /// with the same `writer` (it may hold a partly filled response).
    pub fn read_buffers_stream(
        &mut self,
        now: u64,
        consumer: ConsumerId,
        writer: &mut FrameWriter,
        sink: &mut dyn FrameSink,
        max_bytes: usize,
    ) -> Result<bool, String> {
        let sid = self
            .consumer_session(consumer)
            .ok_or("No tracing session for this consumer")?;
        if self.sessions[&sid].write_into_file {
            return Err("ReadBuffers() is not supported with write_into_file".into());
        }
        let mut to = ToFrames {
            writer,
            sink,
            bytes: 0,
        };
        loop {
            let more = self.read_pass(now, sid, IPC_PASS_BYTES, &mut to);
            if !more {
                to.writer.finish(to.sink);
                to.writer.take_pause();
                return Ok(true);
            }
            if to.writer.take_pause() || to.bytes >= max_bytes {
                return Ok(false);
            }
        }
    }

    /// One read pass into `sink`; returns whether more data is left. With
    /// compression the pass's packets reach `sink` as one compressed packet.
    pub(super) fn read_pass(
        &mut self,
        now: u64,
        sid: SessionId,
        max_bytes: usize,
        sink: &mut dyn PacketSink,
    ) -> bool {
        let codec = self
            .sessions
            .get(&sid)
            .and_then(|s| compress::codec(&s.config));
        let Some(codec) = codec else {
            return self.read_pass_plain(now, sid, max_bytes, sink);
        };
        let mut z = compress::CompressSink::new(codec);
        // A cut's packets for the new file are held before compression
        // (the compressed packet has no sequence to route by).
        z.divert = sink.divert().and_then(Option::take);
        z.lead = sink.take_lead();
        let budget = max_bytes.max(compress::MIN_PASS_BYTES);
        let more = self.read_pass_plain(now, sid, budget, &mut z);
        if let Some(d) = sink.divert() {
            *d = z.divert.take();
        }
        if let Some(p) = z.finish() {
            emit_bytes(sink, &p);
        }
        more
    }

    fn read_pass_plain(
        &mut self,
        now: u64,
        sid: SessionId,
        max_bytes: usize,
        sink: &mut dyn PacketSink,
    ) -> bool {
        let uid = self.service_uid;
        let Some(s) = self.sessions.get_mut(&sid) else {
            return false;
        };
        // Trigger sessions that never triggered produce an empty trace;
        // CLONE_SNAPSHOT sessions are read only through their clones.
        let mode = trigger_mode(&s.config);
        let untriggered = matches!(mode, TriggerMode::START_TRACING | TriggerMode::STOP_TRACING)
            && s.triggers.is_empty();
        let clone_only = mode == TriggerMode::CLONE_SNAPSHOT;
        if s.state != SessionState::ClonedReadOnly && (untriggered || clone_only) {
            return false;
        }
        // Every packet but the trace stats goes through the trace filter.
        let filter = s.read.filter.clone();
        let raw_sink = sink;
        let mut filtered = None;
        let sink: &mut dyn PacketSink = match filter.as_deref() {
            Some(f) => filtered.insert(FilterSink::new(&mut *raw_sink, f)),
            None => &mut *raw_sink,
        };
        // Service packets are few and small: built as messages.
        let mut service: Vec<Vec<u8>> = Vec::new();
        let builtin = s.config.builtin_data_sources.clone().unwrap_or_default();
        let primary = builtin
            .primary_trace_clock
            .map(|c| c as u32)
            .filter(|&c| c != 0);
        if !s.read.did_emit_initial_clock_snapshot && !s.initial_clock_snapshot.is_empty() {
            s.read.did_emit_initial_clock_snapshot = true;
            service.push(sp::clock_snapshot(uid, &s.initial_clock_snapshot, primary));
        }
        for snap in s.read.pending_clock_snapshots.drain(..) {
            service.push(sp::clock_snapshot(uid, &snap, primary));
        }
        let first = !s.read.did_emit_initial_packets;
        if first || s.read.sync_marker_due {
            s.read.sync_marker_due = false;
            service.push(sp::sync_marker(uid));
        }
        if first && !builtin.disable_trace_config.unwrap_or(false) {
            service.push(sp::trace_config(uid, now, &s.config_raw));
        }
        if let Some(t) = s.clone_trigger.as_ref().filter(|_| first) {
            service.push(sp::clone_snapshot_trigger(uid, t));
        }
        for t in &s.triggers[s.read.triggers_emitted..] {
            service.push(sp::trigger(uid, t));
        }
        s.read.triggers_emitted = s.triggers.len();
        if first {
            s.read.did_emit_initial_packets = true;
            service.push(sp::trace_uuid(uid, now, s.uuid.0, s.uuid.1));
            if !builtin.disable_extension_descriptors.unwrap_or(false) {
                service.push(sp::extension_descriptor(uid, now));
            }
            if !builtin.disable_system_info.unwrap_or(false) {
                if let Some(info) = self.env.system_info() {
                    service.push(sp::system_info(uid, now, &info));
                }
            }
        }
        let mut seen = std::mem::take(&mut s.read.machines_seen);
        service.extend(self.machine_packets(
            &mut seen,
            uid,
            !builtin.disable_system_info.unwrap_or(false),
            !builtin.disable_clock_snapshotting.unwrap_or(false),
        ));
        let s = self.sessions.get_mut(&sid).expect("checked above");
        s.read.machines_seen = seen;
        s.read.pending_events.sort_by_key(|e| e.1);
        for (f, ts) in s.read.pending_events.drain(..) {
            service.push(sp::service_event(uid, f, ts));
        }
        for (ts, event) in s.read.faults.pending.drain(..) {
            service.push(sp::service_event_raw(uid, ts, &event));
        }
        let mut bytes: usize = service.iter().map(Vec::len).sum();
        service.iter().for_each(|p| emit_bytes(sink, p));

        let mut has_more = false;
        // Consecutive packets mostly come from one sequence: reuse its
        // trailer instead of looking the sequence id up and encoding again.
        let mut last: Option<(PacketInfo, TrustedTrailer)> = None;
        'buffers: for (index, &bid) in s.buffers.iter().enumerate() {
            let Some(buf) = self.buffers.get_mut(&bid) else {
                continue;
            };
            sink.set_buffer(Some(index));
            buf.begin_read();
            while let Some((pkt, info)) = buf.read_next_trace_packet() {
                if validate_packet(pkt.slices()).is_err() {
                    s.stats.invalid_packets += 1;
                    continue;
                }
                let trailer = match last {
                    Some((prev, t)) if prev == info => t,
                    _ => {
                        let seq = s.seq_ids.get_or_assign(
                            info.client.machine_id,
                            info.producer_id,
                            info.writer_id,
                        );
                        let t =
                            TrustedTrailer::new(&info.client, seq, info.previous_packet_dropped);
                        last = Some((info, t));
                        t
                    }
                };
                let trailer = trailer.as_bytes();
                bytes += pkt.size() + trailer.len();
                let go_on = sink.packet(&pkt, trailer);
                if bytes >= max_bytes || !go_on {
                    has_more = true;
                    break 'buffers;
                }
            }
        }
        sink.set_buffer(None);
        if !has_more {
            s.add_event(event::READ_TRACING_BUFFERS_COMPLETED, now);
            for (f, ts) in s.read.pending_events.drain(..) {
                emit_bytes(sink, &sp::service_event(uid, f, ts));
            }
        }
        let counted = filtered.map(|f| f.stats);
        if let Some(c) = &counted {
            s.read.filter_stats.add(c);
        }
        if !has_more && s.read.stats_due {
            s.read.stats_due = false;
            let stats = self.trace_stats_for(sid);
            let packet = sp::trace_stats(uid, now, &stats);
            emit_bytes(raw_sink, &packet);
            if let (Some(s), Some(_)) = (self.sessions.get_mut(&sid), counted) {
                // Counted as passed through, as upstream does.
                let st = &mut s.read.filter_stats;
                st.input_packets += 1;
                st.input_bytes += packet.len() as u64;
                st.output_bytes += packet.len() as u64;
            }
        }
        has_more
    }

    /// Drains the session into its output file (write_into_file), all of it.
    pub(super) fn write_into_file_pass(&mut self, now: u64, sid: SessionId) {
        while self.write_into_file_step(now, sid) {}
    }

    /// Writes at most about [`FILE_PASS_BYTES`] to the session's file.
    /// Returns true when more is readable now. Periodic writes go one step
    /// per timer, so commits from producers are served between steps: a
    /// long pass would leave their shared memory full meanwhile.
    fn write_into_file_step(&mut self, now: u64, sid: SessionId) -> bool {
        {
            let Some(s) = self.sessions.get(&sid) else {
                return false;
            };
            if s.file_closed {
                return false;
            }
            let data = self
                .spare_file_bufs
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(FILE_PASS_BYTES + FILE_PASS_BYTES / 8));
            let s = self.sessions.get_mut(&sid).expect("checked above");
            let mut file = ToFile {
                data,
                written: s.file_bytes_written,
                max: s.config.max_file_size_bytes.unwrap_or(0),
                crossed: false,
                divert: s.read.divert.take(),
                lead: std::mem::take(&mut s.read.held_for_new_file),
            };
            let more = self.read_pass(now, sid, FILE_PASS_BYTES, &mut file);
            let ToFile {
                mut data,
                mut written,
                crossed,
                divert,
                mut lead,
                ..
            } = file;
            // No buffer was read this time: the held packets still go first.
            written += lead.len() as u64;
            data.append(&mut lead);
            let s = self.sessions.get_mut(&sid).expect("checked above");
            s.read.divert = divert;
            s.file_bytes_written = written;
            s.file_closed |= crossed;
            if data.is_empty() {
                self.recycle_file_buffer(data);
            } else {
                self.emit(Output::WriteToFile { session: sid, data });
            }
            if crossed {
                self.emit(Output::CloseFile { session: sid });
                self.stop_session(now, sid);
                return false;
            }
            more
        }
    }

    /// A write_into_file buffer went past half full before its next
    /// periodic write: write now, and on without a pause while more is
    /// readable, instead of letting a fast producer fill it and lose chunks
    /// (DISCARD) or overwrite them (RING_BUFFER) while the period runs.
    pub(super) fn write_early(&mut self, now: u64) {
        for (&sid, s) in self.sessions.iter_mut() {
            let waiting = s.write_into_file
                && s.state == SessionState::Started
                && !s.file_closed
                && !s.read.file_backlog;
            let half_full = |b: &BufferId| {
                self.buffers
                    .get(b)
                    .is_some_and(|b| b.written_since_read() > b.size() as u64 / 2)
            };
            if waiting && s.buffers.iter().any(half_full) {
                // A backlog skips the flush a periodic write may start.
                s.read.file_backlog = true;
                self.timers.advance(Timer::FileWrite(sid), now);
            }
        }
    }

    pub(super) fn on_file_write_timer(&mut self, now: u64, sid: SessionId) {
        let Some(s) = self.sessions.get(&sid) else {
            return;
        };
        if s.state != SessionState::Started || s.file_closed {
            return;
        }
        if !s.read.file_backlog && super::enable::flush_before_write(&s.config) {
            let timeout = s.flush_timeout_ms();
            let flags = flush_flags::REASON_PERIODIC | flush_flags::INITIATOR_TRACED;
            self.start_flush(now, sid, timeout, flags, FlushOrigin::FileWrite);
            return;
        }
        self.write_file_period(now, sid);
    }

    /// One step of a periodic write into the file; arms the next one.
    pub(super) fn write_file_period(&mut self, now: u64, sid: SessionId) {
        let Some(s) = self.sessions.get(&sid) else {
            return;
        };
        if s.state != SessionState::Started || s.file_closed {
            return;
        }
        let period = super::enable::file_write_period_ms(&s.config);
        let sync = s.config.fflush_post_write == Some(FFlushMode::FFLUSH_ENABLED);
        let more = self.write_into_file_step(now, sid);
        if let Some(s) = self
            .sessions
            .get_mut(&sid)
            .filter(|s| s.state == SessionState::Started && !s.file_closed)
        {
            s.read.file_backlog = more;
            // A backlog goes on right after pending IPC (and after this
            // step's bytes were written and the buffer handed back): a
            // deadline of `now` would run again in this very timer pass.
            let next = if more { now + 1 } else { now + ms(period) };
            self.timers.add(next, Timer::FileWrite(sid));
            if sync && !more {
                self.emit(Output::SyncFile { session: sid });
            }
        }
    }

    pub(super) fn on_snapshot_tick(&mut self, now: u64, sid: SessionId) {
        let snapshot = self.env.clock_snapshot();
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        if !s.is_active() {
            return;
        }
        if s.read.pending_clock_snapshots.len() < MAX_PENDING_SNAPSHOTS && !snapshot.is_empty() {
            s.read.pending_clock_snapshots.push(snapshot);
        }
        s.read.sync_marker_due = true;
        s.read.stats_due = true;
        let period = s
            .config
            .builtin_data_sources
            .as_ref()
            .and_then(|b| b.snapshot_interval_ms)
            .filter(|&v| v > 0)
            .unwrap_or(10_000);
        self.timers.add(now + ms(period), Timer::SnapshotTick(sid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_sink(max: u64) -> ToFile {
        ToFile {
            data: Vec::new(),
            written: 0,
            max,
            crossed: false,
            divert: None,
            lead: Vec::new(),
        }
    }

    #[test]
    fn file_packets_are_trace_fields_up_to_the_limit() {
        let data = [1u8, 2, 9, 3];
        let ranges = [(0, 2), (3, 1)];
        let p = TracePacket::from_ranges(&data, &ranges);
        let mut f = file_sink(0);
        assert!(f.packet(&p, &[7]));
        assert_eq!(f.data, [0x0a, 4, 1, 2, 3, 7]);
        assert_eq!(f.written, 6);

        // 6 bytes per packet: the third crosses 15 and ends the file.
        let mut f = file_sink(15);
        for _ in 0..4 {
            assert!(f.packet(&p, &[7]));
        }
        assert!(f.crossed);
        assert_eq!((f.written, f.data.len()), (12, 12));
    }
}

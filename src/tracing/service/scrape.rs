//! SMB scraping: chunks still sitting in a producer's SMB are copied
//! (without changing their state) into the session's buffers, so data of
//! writers that never filled a chunk is not lost. Done when a flush
//! completes and when the session stops, for producers that asked for it
//! (InitializeConnection `smb_scraping_mode = ENABLED`), and for every
//! producer when its connection closes: a producer that died cannot commit
//! what it had written. BeingWritten chunks are copied as incomplete (their
//! last packet may be in progress). Only writers registered to one of the
//! session's buffers are scraped.

use crate::tracing::core::smb_abi::{bitmap_num_chunks, ChunkState};

use super::commit::SmbChunkPayload;
use super::service::TracingService;
use super::types::{ProducerId, SessionId};

impl TracingService {
    pub(super) fn scrape_session_smbs(&mut self, sid: SessionId) {
        let Some(s) = self.sessions.get(&sid) else {
            return;
        };
        let producers: Vec<_> = s.producers.iter().copied().collect();
        for pid in producers {
            self.scrape_producer_smb(sid, pid, false);
        }
    }

    /// Scrapes one producer's SMB into session `sid`'s buffers; `always`
    /// ignores the producer's scraping mode (it is disconnecting).
    pub(super) fn scrape_producer_smb(&mut self, sid: SessionId, pid: ProducerId, always: bool) {
        let Some(s) = self.sessions.get(&sid) else {
            return;
        };
        let buffers = s.buffers.clone();
        let Some(p) = self.producers.get(&pid) else {
            return;
        };
        if !(always || p.info.smb_scraping_enabled) || p.writers.is_empty() {
            return;
        }
        let Some(smb) = p.smb.clone() else { return };
        let client = p.client_identity();
        for page in 0..smb.num_pages() {
            let Ok(bitmap) = smb.page_bitmap(page) else {
                continue;
            };
            for chunk in 0..bitmap_num_chunks(bitmap) {
                let Ok((state, c)) = smb.chunk_at(page, chunk) else {
                    continue;
                };
                let complete = match state {
                    ChunkState::Complete => true,
                    ChunkState::BeingWritten => false,
                    _ => continue,
                };
                let h = smb.chunk_header(&c);
                let Some(&target) = self
                    .producers
                    .get(&pid)
                    .and_then(|p| p.writers.get(&h.writer_id))
                else {
                    continue;
                };
                if !buffers.contains(&target) {
                    continue;
                }
                if let Some(buf) = self.buffers.get_mut(&target) {
                    let body = SmbChunkPayload {
                        smb: &smb,
                        chunk: &c,
                    };
                    buf.copy_chunk_from(
                        pid,
                        client,
                        h.writer_id,
                        h.chunk_id,
                        h.packet_count,
                        h.flags,
                        complete,
                        &body,
                    );
                }
            }
        }
    }
}

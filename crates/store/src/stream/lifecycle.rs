//! The segments of a stream log over time: a new segment when the active one is full (it
//! starts with a tracking snapshot, so that retention never loses tracking state), whole
//! segments deleted by retention (never the newest), and truncation to a chunk boundary.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use super::chunk::{CHUNK_TRACKING_SNAPSHOT, CHUNK_USER};
use super::log::StreamLog;
use super::recovery::{self, create_segment, recover_tracking, truncate_index};
use super::segment::Segment;
use super::view::NONE;
use super::Entry;
use crate::error::StoreError;

impl StreamLog {
    /// Starts a new segment when the active one reached `segment_bytes_max` or
    /// `segment_chunks_max` (an empty one never rolls); it opens with a tracking snapshot
    /// when `snapshot` and there is tracking state.
    pub(crate) fn roll_if_full(
        &mut self,
        timestamp_ms: i64,
        snapshot: bool,
    ) -> Result<(), StoreError> {
        let chunks = self.active.count();
        let bytes = self.active.bytes.load(Ordering::Acquire);
        let full = bytes >= self.config.segment_bytes_max
            || chunks >= self.config.segment_chunks_max as usize;
        if chunks == 0 || !full {
            return Ok(());
        }
        if self.sync.fsync() {
            // The sealed index is trusted at open only if it is whole.
            self.active
                .index
                .sync()
                .map_err(|error| StoreError::io("fsync", self.active.index.path(), error))?;
        }
        let segment = create_segment(self.io.as_ref(), &self.config.dir, self.next_offset)?;
        if self.sync.fsync() {
            self.io
                .sync_dir(&self.config.dir)
                .map_err(|error| StoreError::io("fsync", &self.config.dir, error))?;
        }
        let segment = Arc::new(segment);
        self.shared.segments.write().push(segment.clone());
        let sealed = std::mem::replace(&mut self.active, segment);
        sealed.seal();
        tracing::debug!(
            "stream log {}: new segment at offset {}",
            self.config.dir.display(),
            self.next_offset
        );
        // As osiris does after a roll: the sealed segment may be the one retention waits for.
        if let Err(error) = self.apply_retention(super::log::now_ms()) {
            tracing::warn!(
                "stream log {}: retention after a new segment: {error}",
                self.config.dir.display()
            );
        }
        if snapshot && !self.tracking.is_empty() {
            let mut body = Vec::new();
            self.tracking.encode_snapshot(&mut body);
            let entries = [Entry::Simple(Bytes::from(body))];
            let record = self.write_chunk(CHUNK_TRACKING_SNAPSHOT, &entries, timestamp_ms, &[])?;
            self.publish(&record);
            self.mark_dirty(&record);
        }
        Ok(())
    }

    /// Deletes whole segments beyond retention (never the newest); returns how many. Size:
    /// the oldest go while the log is larger than `max_bytes`. Age: the oldest go while their
    /// last chunk is older than `max_age_ms`.
    pub fn apply_retention(&mut self, now_ms: i64) -> Result<u32, StoreError> {
        let retention = self.config.retention;
        let segments = self.shared.segments();
        let mut total: u64 = segments
            .iter()
            .map(|segment| segment.bytes.load(Ordering::Acquire))
            .sum();
        let mut remove = 0;
        for segment in &segments[..segments.len().saturating_sub(1)] {
            let bytes = segment.bytes.load(Ordering::Acquire);
            let too_big = retention.max_bytes.is_some_and(|max| total > max);
            let too_old = match retention.max_age_ms {
                Some(max_age_ms) => {
                    let last = segment.record(segment.count().wrapping_sub(1))?;
                    let limit =
                        now_ms.saturating_sub(i64::try_from(max_age_ms).unwrap_or(i64::MAX));
                    last.is_none_or(|record| record.timestamp_ms < limit)
                }
                None => false,
            };
            if !too_big && !too_old {
                break;
            }
            total -= bytes;
            remove += 1;
        }
        if remove == 0 {
            return Ok(0);
        }
        let removed = self.drop_oldest(remove);
        for segment in &removed {
            recovery::remove_segment(self.io.as_ref(), &self.config.dir, segment)?;
        }
        Ok(u32::try_from(remove).unwrap_or(u32::MAX))
    }

    /// Takes the `count` oldest segments out of the log (readers move on).
    fn drop_oldest(&self, count: usize) -> Vec<Arc<Segment>> {
        let mut segments = self.shared.segments.write();
        assert!(
            count < segments.len(),
            "invariant: the newest segment stays"
        );
        let removed: Vec<_> = segments.drain(..count).collect();
        let first = segments[0].first_offset;
        drop(segments);
        let chunks: u64 = removed.iter().map(|segment| segment.count() as u64).sum();
        self.shared.chunks.fetch_sub(chunks, Ordering::AcqRel);
        self.shared.first_offset.store(first, Ordering::Release);
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        tracing::info!(
            "stream log {}: retention deleted {} segments; the log now starts at offset {first}",
            self.config.dir.display(),
            removed.len()
        );
        removed
    }

    /// Cuts the log so that it ends at `next_offset`, which must be the first offset of one
    /// of its chunks (or its end); the tracking state is read again from what stays.
    pub fn truncate(&mut self, next_offset: u64) -> Result<(), StoreError> {
        let dir = self.config.dir.display().to_string();
        if next_offset == self.next_offset {
            return Ok(());
        }
        let first = self.shared.first_offset.load(Ordering::Acquire);
        if next_offset > self.next_offset || next_offset < first {
            return Err(StoreError::Refused {
                what: format!(
                    "cannot truncate stream log {dir} to offset {next_offset}: it holds offsets \
                     {first} to {}",
                    self.next_offset
                ),
            });
        }
        let (at, segment) = self
            .shared
            .segment_for(next_offset)
            .expect("invariant: an offset inside the log has a segment");
        let keep = segment.partition_point(|record| record.first_offset < next_offset)?;
        let boundary = segment.record(keep)?;
        if boundary.is_none_or(|record| record.first_offset != next_offset) {
            return Err(StoreError::Refused {
                what: format!(
                    "cannot truncate stream log {dir} to offset {next_offset}: it is inside a \
                     chunk; truncate to a chunk's first offset"
                ),
            });
        }
        let boundary = boundary.expect("invariant: checked above");
        self.cut_segments(at, segment, keep, boundary.position)
    }

    /// Drops every segment after `at`, and `segment` (number `at`) from record `keep` on;
    /// the last segment left becomes the active one.
    fn cut_segments(
        &mut self,
        at: usize,
        segment: Arc<Segment>,
        keep: usize,
        position: u64,
    ) -> Result<(), StoreError> {
        let whole = keep == 0 && at > 0;
        let removed: Vec<Arc<Segment>> = {
            let mut segments = self.shared.segments.write();
            segments.drain(if whole { at } else { at + 1 }..).collect()
        };
        for gone in &removed {
            recovery::remove_segment(self.io.as_ref(), &self.config.dir, gone)?;
        }
        let active = self
            .shared
            .segments()
            .last()
            .cloned()
            .expect("invariant: a segment stays");
        if !whole {
            segment
                .file
                .truncate(position)
                .map_err(|error| StoreError::io("truncate", segment.path(), error))?;
            truncate_index(&segment, keep)?;
            segment.cut(keep, position);
        }
        if !Arc::ptr_eq(&active, &self.active) {
            active.activate()?;
        }
        self.active = active;
        self.reread_state()
    }

    /// The end, counts, last user chunk and tracking, from the segments (after truncation).
    fn reread_state(&mut self) -> Result<(), StoreError> {
        let segments = self.shared.segments();
        let active = &self.active;
        let next_offset = match active.record(active.count().wrapping_sub(1))? {
            Some(record) => record.next_offset(),
            None => active.first_offset,
        };
        let mut last_chunk = NONE;
        'segments: for segment in segments.iter().rev() {
            for at in (0..segment.count()).rev() {
                let record = segment
                    .record(at)?
                    .expect("invariant: a record below count");
                if record.chunk_type == CHUNK_USER {
                    last_chunk = record.first_offset;
                    break 'segments;
                }
            }
        }
        let chunks = segments.iter().map(|segment| segment.count() as u64).sum();
        self.tracking = recover_tracking(active)?;
        self.next_offset = next_offset;
        self.shared.chunks.store(chunks, Ordering::Release);
        self.shared.last_chunk.store(last_chunk, Ordering::Release);
        self.shared
            .next_offset
            .store(next_offset, Ordering::Release);
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}

//! A message body as a chain of `Bytes` slices: the content-body frames (or transfer frames)
//! of a publish, each a slice of the read buffer it arrived in, kept apart instead of joined.
//!
//! A body that arrived in one frame (the common, small case) is one slice and costs what a
//! `Bytes` costs. A large body split over many frames is never copied into one buffer: the
//! writers hand its slices to `writev`, split at the reader's frame size without copying, and
//! the message store writes them after the record header with one vectored write.

use std::borrow::Cow;
use std::fmt;

use bytes::{Bytes, BytesMut};

/// The bytes of a message body, in order.
#[derive(Clone, Default)]
pub struct Body {
    repr: Repr,
}

#[derive(Clone)]
enum Repr {
    One(Bytes),
    /// At least two non-empty slices, and their total length.
    Chain {
        chunks: Box<[Bytes]>,
        len: usize,
    },
}

impl Default for Repr {
    fn default() -> Repr {
        Repr::One(Bytes::new())
    }
}

impl Body {
    /// A body from its slices in order; empty slices are left out.
    pub fn from_chunks(chunks: Vec<Bytes>) -> Body {
        let mut chunks = chunks;
        chunks.retain(|chunk| !chunk.is_empty());
        let repr = match chunks.len() {
            0 => Repr::One(Bytes::new()),
            1 => Repr::One(chunks.pop().unwrap_or_default()),
            _ => {
                let len = chunks.iter().map(Bytes::len).sum();
                Repr::Chain {
                    chunks: chunks.into_boxed_slice(),
                    len,
                }
            }
        };
        Body { repr }
    }

    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::One(bytes) => bytes.len(),
            Repr::Chain { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The slices in order (one for a body that came in one frame).
    pub fn chunks(&self) -> &[Bytes] {
        match &self.repr {
            Repr::One(bytes) => std::slice::from_ref(bytes),
            Repr::Chain { chunks, .. } => chunks,
        }
    }

    /// The body in one piece: borrowed when it is one slice, joined (copied) otherwise. For
    /// the paths that must parse or show a body (AMQP 1.0 conversion, the HTTP API), never
    /// for the message path.
    pub fn contiguous(&self) -> Cow<'_, [u8]> {
        match &self.repr {
            Repr::One(bytes) => Cow::Borrowed(bytes),
            Repr::Chain { .. } => Cow::Owned(self.join().to_vec()),
        }
    }

    /// The body as one `Bytes`: the slice itself when it is one, a joined copy otherwise.
    pub fn to_bytes(&self) -> Bytes {
        match &self.repr {
            Repr::One(bytes) => bytes.clone(),
            Repr::Chain { .. } => self.join().freeze(),
        }
    }

    /// The body copied into a `Vec` (tests and tools).
    pub fn to_vec(&self) -> Vec<u8> {
        self.contiguous().into_owned()
    }

    fn join(&self) -> BytesMut {
        let mut joined = BytesMut::with_capacity(self.len());
        self.chunks()
            .iter()
            .for_each(|chunk| joined.extend_from_slice(chunk));
        joined
    }

    /// Calls `each` with the slices covering bytes `range` of the body, in order: sub-slices
    /// of the chunks (reference counts, no copies). A range past the end is cut at the end.
    pub fn for_each_slice(&self, range: std::ops::Range<usize>, mut each: impl FnMut(Bytes)) {
        let mut chunk_start = 0;
        for chunk in self.chunks() {
            let chunk_end = chunk_start + chunk.len();
            if chunk_end > range.start && chunk_start < range.end {
                let from = range.start.saturating_sub(chunk_start);
                let to = range.end.min(chunk_end) - chunk_start;
                each(chunk.slice(from..to));
            }
            if chunk_end >= range.end {
                return;
            }
            chunk_start = chunk_end;
        }
    }

    /// Appends bytes `range` of the body to `out` (a copy: for pieces too small to be worth
    /// a slice of their own).
    pub fn copy_range_to(&self, range: std::ops::Range<usize>, out: &mut BytesMut) {
        self.for_each_slice(range, |slice| out.extend_from_slice(&slice));
    }
}

impl From<Bytes> for Body {
    fn from(bytes: Bytes) -> Body {
        Body {
            repr: Repr::One(bytes),
        }
    }
}

impl From<&'static [u8]> for Body {
    fn from(bytes: &'static [u8]) -> Body {
        Body::from(Bytes::from_static(bytes))
    }
}

impl From<Vec<u8>> for Body {
    fn from(bytes: Vec<u8>) -> Body {
        Body::from(Bytes::from(bytes))
    }
}

impl PartialEq for Body {
    fn eq(&self, other: &Body) -> bool {
        self.len() == other.len() && self.contiguous() == other.contiguous()
    }
}

impl Eq for Body {}

impl PartialEq<[u8]> for Body {
    fn eq(&self, other: &[u8]) -> bool {
        self.len() == other.len() && *self.contiguous() == *other
    }
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.repr {
            Repr::One(bytes) => fmt::Debug::fmt(bytes, f),
            Repr::Chain { chunks, len } => f
                .debug_struct("Body")
                .field("len", len)
                .field("chunks", &chunks.len())
                .finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain() -> Body {
        let bytes: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let whole = Bytes::from(bytes);
        Body::from_chunks(vec![
            whole.slice(0..300),
            Bytes::new(),
            whole.slice(300..301),
            whole.slice(301..1000),
        ])
    }

    #[test]
    fn a_chain_keeps_its_slices_and_reads_as_the_joined_bytes() {
        let body = chain();
        assert_eq!(body.chunks().len(), 3, "the empty slice is left out");
        assert_eq!(body.len(), 1000);
        let expected: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        assert_eq!(&*body.contiguous(), &expected[..]);
        assert_eq!(&body.to_bytes()[..], &expected[..]);
        assert_eq!(body, Body::from(expected));
    }

    #[test]
    fn ranges_cross_chunk_boundaries_without_copies() {
        let body = chain();
        let whole = body.to_bytes();
        for (start, end) in [
            (0, 1000),
            (0, 300),
            (299, 302),
            (300, 301),
            (500, 2000),
            (999, 1000),
        ] {
            let mut slices = Vec::new();
            body.for_each_slice(start..end, |s| slices.push(s));
            let got: Vec<u8> = slices.iter().flat_map(|s| s.iter().copied()).collect();
            assert_eq!(got, whole[start..end.min(1000)], "range {start}..{end}");
            assert!(slices.iter().all(|s| !s.is_empty()), "range {start}..{end}");
            let mut copied = BytesMut::new();
            body.copy_range_to(start..end, &mut copied);
            assert_eq!(copied, whole[start..end.min(1000)]);
        }
    }

    #[test]
    fn one_slice_is_not_a_chain() {
        let bytes = Bytes::from_static(b"hello");
        let body = Body::from_chunks(vec![Bytes::new(), bytes.clone()]);
        assert_eq!(body.chunks(), &[bytes]);
        assert!(matches!(body.contiguous(), Cow::Borrowed(_)));
        assert!(Body::from_chunks(Vec::new()).is_empty());
    }
}

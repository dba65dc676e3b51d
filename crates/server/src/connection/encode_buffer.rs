//! When a connection's encode buffer (where its small outgoing frames are written before a
//! flush) is kept between flushes, and when it is dropped. Both protocols' writers use it.

use bytes::BytesMut;

/// Capacity always kept for an encode buffer between flushes. Above it, a buffer is kept only
/// while flushes fill a good part of it (a streaming consumer's writes of hundreds of KiB are
/// not regrown, page by fresh page, every time), and dropped after a burst; a writer's
/// `shrink` drops any once its connection is quiet.
pub const KEEP_BYTES: usize = 64 * 1024;
/// A buffer above `KEEP_BYTES` is dropped when this many flushes in a row used less than a
/// quarter of it (`USE_MIN_DIVISOR`). Not at the first: a consumer that outruns its client
/// writes in waves, a large write after a stall and small ones between, and dropping at each
/// small one regrew the buffer from nothing about 60 times a second in PerfTest's autoack
/// workload (page faults were 3% of the broker's CPU there).
pub const SMALL_FLUSHES_MAX: u8 = 64;
const USE_MIN_DIVISOR: usize = 4;

/// A writer's record of its recent flushes.
#[derive(Debug, Default)]
pub struct Keeper {
    /// Flushes in a row that used little of a large encode buffer.
    small_flushes: u8,
}

impl Keeper {
    /// After a flush that wrote `written` bytes: drops `encode` when flushes have used little
    /// of it for long enough. The bytes written count toward its allocation: writing or
    /// splitting off a `BytesMut`'s contents lowers its capacity, and the next reserve takes
    /// the room back.
    pub fn after_flush(&mut self, encode: &mut BytesMut, written: usize) {
        let allocated = encode.capacity().saturating_add(written);
        if allocated > KEEP_BYTES && written < allocated / USE_MIN_DIVISOR {
            self.small_flushes += 1;
            if self.small_flushes >= SMALL_FLUSHES_MAX {
                self.small_flushes = 0;
                *encode = BytesMut::new();
            }
        } else {
            self.small_flushes = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_buffer_goes_only_after_many_small_flushes_in_a_row() {
        let mut keeper = Keeper::default();
        let mut encode = BytesMut::with_capacity(4 * KEEP_BYTES);
        let large = encode.capacity();
        for _ in 1..SMALL_FLUSHES_MAX {
            keeper.after_flush(&mut encode, 100);
        }
        assert_eq!(encode.capacity(), large, "dropped within a wave");
        keeper.after_flush(&mut encode, 2 * KEEP_BYTES); // a large one restarts the count
        for _ in 1..SMALL_FLUSHES_MAX {
            keeper.after_flush(&mut encode, 100);
        }
        assert_eq!(encode.capacity(), large, "dropped within the second wave");
        keeper.after_flush(&mut encode, 100);
        assert_eq!(
            encode.capacity(),
            0,
            "kept after {SMALL_FLUSHES_MAX} small flushes"
        );

        let mut small = BytesMut::with_capacity(KEEP_BYTES / 2);
        for _ in 0..=SMALL_FLUSHES_MAX {
            keeper.after_flush(&mut small, 10);
        }
        assert!(
            small.capacity() >= KEEP_BYTES / 2,
            "a small buffer is always kept"
        );
    }
}

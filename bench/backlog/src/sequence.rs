//! Message bodies that carry their own sequence number, and the check that they come back in
//! publish order.
//!
//! Every body starts with the big-endian `u64` sequence number of the message (0 for the first
//! published, then 1, 2, ...), padded with a fixed pattern to the requested size. A consumer
//! that sees exactly 0, 1, 2, ... N-1 has proved that the broker lost none of the N messages,
//! duplicated none and kept them in the order they were published (one publishing channel
//! into one queue, so that order is the publish order).

use std::fmt;

/// Bytes at the start of every body that hold the sequence number.
pub const SEQ_LEN: usize = 8;

/// A body of `size` bytes (at least [`SEQ_LEN`]) for sequence number 0; [`write_seq`] turns
/// it into the body of any other number without reallocating.
pub fn body(size: usize) -> Vec<u8> {
    let mut body: Vec<u8> = (0..size.max(SEQ_LEN)).map(|i| (i % 251) as u8).collect();
    write_seq(&mut body, 0);
    body
}

/// Writes `seq` into the first [`SEQ_LEN`] bytes of `body`.
pub fn write_seq(body: &mut [u8], seq: u64) {
    body[..SEQ_LEN].copy_from_slice(&seq.to_be_bytes());
}

/// The sequence number a body carries, or `None` when it is too short to carry one.
pub fn read_seq(body: &[u8]) -> Option<u64> {
    let bytes: [u8; SEQ_LEN] = body.get(..SEQ_LEN)?.try_into().ok()?;
    Some(u64::from_be_bytes(bytes))
}

/// Follows the sequence numbers of the deliveries of one queue and stops at the first one
/// that is not the next expected: a gap (lost messages), a repeat (duplicate or redelivery of
/// an acknowledged message) or a body that carries no number.
#[derive(Debug, Clone)]
pub struct OrderCheck {
    first: u64,
    expected: u64,
}

/// The first delivery out of order: which one it was, and what it carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfOrder {
    /// Deliveries that were in order before this one.
    pub in_order: u64,
    /// The sequence number that should have come.
    pub expected: u64,
    /// The sequence number that came, `None` for a body shorter than [`SEQ_LEN`] bytes.
    pub got: Option<u64>,
    /// Length of the offending body.
    pub body_len: usize,
}

impl OrderCheck {
    /// A check that expects sequence number `first` first.
    pub fn starting_at(first: u64) -> Self {
        OrderCheck {
            first,
            expected: first,
        }
    }

    /// The sequence number the next delivery must carry.
    pub fn expected(&self) -> u64 {
        self.expected
    }

    /// Checks the next delivery's body.
    pub fn check(&mut self, body: &[u8]) -> Result<(), OutOfOrder> {
        let got = read_seq(body);
        if got != Some(self.expected) {
            return Err(OutOfOrder {
                in_order: self.expected - self.first,
                expected: self.expected,
                got,
                body_len: body.len(),
            });
        }
        self.expected += 1;
        Ok(())
    }
}

impl fmt::Display for OutOfOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(got) = self.got else {
            return write!(
                f,
                "first out-of-order message: delivery #{} has a body of {} bytes, too short to \
                 carry a sequence number (expected sequence {}); was the queue filled by \
                 another tool?",
                self.in_order + 1,
                self.body_len,
                self.expected
            );
        };
        let what = if got > self.expected {
            format!("{} messages missing before it", got - self.expected)
        } else {
            "a duplicate or an earlier message delivered again".to_string()
        };
        write!(
            f,
            "first out-of-order message: delivery #{} carries sequence {got}, expected {} ({what})",
            self.in_order + 1,
            self.expected
        )
    }
}

impl std::error::Error for OutOfOrder {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_carries_its_sequence_and_size() {
        let mut body = body(1024);
        assert_eq!(body.len(), 1024);
        assert_eq!(read_seq(&body), Some(0));
        write_seq(&mut body, 0x0102_0304_0506_0708);
        assert_eq!(&body[..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(read_seq(&body), Some(0x0102_0304_0506_0708));
    }

    #[test]
    fn bodies_are_never_shorter_than_the_sequence() {
        assert_eq!(body(0).len(), SEQ_LEN);
        assert_eq!(read_seq(&[1, 2, 3]), None);
    }

    #[test]
    fn in_order_deliveries_pass() {
        let mut check = OrderCheck::starting_at(0);
        let mut body = body(16);
        for seq in 0..5 {
            write_seq(&mut body, seq);
            check.check(&body).unwrap();
        }
        assert_eq!(check.expected(), 5);
    }

    #[test]
    fn a_gap_names_the_first_missing_sequence() {
        let mut check = OrderCheck::starting_at(0);
        let mut body = body(16);
        check.check(&body).unwrap();
        write_seq(&mut body, 4);
        let error = check.check(&body).unwrap_err();
        assert_eq!((error.expected, error.got), (1, Some(4)));
        let text = error.to_string();
        assert!(
            text.contains("delivery #2 carries sequence 4, expected 1"),
            "{text}"
        );
        assert!(text.contains("3 messages missing"), "{text}");
    }

    #[test]
    fn a_check_can_start_past_zero() {
        let mut check = OrderCheck::starting_at(100);
        let mut body = body(16);
        write_seq(&mut body, 100);
        check.check(&body).unwrap();
        write_seq(&mut body, 102);
        let error = check.check(&body).unwrap_err();
        assert_eq!(
            (error.in_order, error.expected, error.got),
            (1, 101, Some(102))
        );
        assert!(error.to_string().contains("delivery #2 carries"), "{error}");
    }

    #[test]
    fn a_duplicate_is_out_of_order() {
        let mut check = OrderCheck::starting_at(0);
        let body = body(16);
        check.check(&body).unwrap();
        let error = check.check(&body).unwrap_err();
        assert_eq!((error.expected, error.got), (1, Some(0)));
        assert!(error.to_string().contains("duplicate"), "{error}");
    }

    #[test]
    fn a_short_body_is_out_of_order() {
        let mut check = OrderCheck::starting_at(0);
        let error = check.check(b"abc").unwrap_err();
        assert_eq!(error.got, None);
        assert!(error.to_string().contains("too short"), "{error}");
    }
}

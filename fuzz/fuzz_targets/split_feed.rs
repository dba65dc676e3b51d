//! The input layout the frame targets share: byte 0 picks where the stream is cut in two
//! (scaled to its length), byte 1 picks the frame size limit among the target's three, and the
//! rest is the stream of frames. The first part is decoded alone and the rest arrives after it,
//! so incomplete frames are exercised.

use bytes::BytesMut;

/// Runs `drain` over the first part, then, when that ran dry rather than failing, again with
/// the rest appended. `drain` returns `true` when the buffer ran dry, `false` on an error.
pub fn feed(data: &[u8], limits: [u32; 3], mut drain: impl FnMut(&mut BytesMut, u32) -> bool) {
    let [split_choice, limit_choice, stream @ ..] = data else {
        return;
    };
    let [first_limit, second_limit, third_limit] = limits;
    let limit = match limit_choice % 3 {
        0 => first_limit,
        1 => second_limit,
        _ => third_limit,
    };
    let split = usize::from(*split_choice) * stream.len() / 255;
    let (first, second) = stream.split_at(split);
    let mut buf = BytesMut::from(first);
    if drain(&mut buf, limit) {
        buf.extend_from_slice(second);
        drain(&mut buf, limit);
    }
}

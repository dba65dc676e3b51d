//! Fast paths for the hot performatives, transfer and disposition: decoded straight from the
//! frame's bytes and encoded straight into the output, without an intermediate `Value` tree.
//! Each handles only the common encodings and falls back (returns `None` / `false`) to the
//! general `Value` code for anything else, so results and errors are the general path's:
//! the fast decoder accepts only input the general decoder decodes to the same performative,
//! and the fast encoder writes exactly the bytes the general encoder writes.

use bytes::{BufMut, Bytes, BytesMut};

use super::performative::{code, DeliveryState, Disposition, Performative, Transfer};

/// Longest delivery tag the fast encoder writes (the spec's limit is 32 bytes); keeps every
/// fast-encoded field list under 255 bytes, so list8 as the general encoder chooses.
const TAG_MAX: usize = 32;

// ---- decoding ----

struct Cursor<'a> {
    buf: &'a Bytes,
    pos: usize,
    end: usize,
}

/// One field as the general decoder would hand it to `Fields`: `None` for null.
impl Cursor<'_> {
    fn byte(&mut self) -> Option<u8> {
        if self.pos >= self.end {
            return None;
        }
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    fn slice(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.pos.checked_add(n)?;
        if end > self.end {
            return None;
        }
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    /// A uint field (uint, ushort or ubyte encodings, as `Fields::u32`); outer `None` means
    /// "fall back".
    fn u32(&mut self) -> Option<Option<u32>> {
        match self.byte()? {
            0x40 => Some(None),
            0x43 => Some(Some(0)),
            0x52 | 0x50 => Some(Some(u32::from(self.byte()?))),
            0x60 => {
                let s = self.slice(2)?.first_chunk::<2>()?;
                Some(Some(u32::from(u16::from_be_bytes(*s))))
            }
            0x70 => {
                let s = self.slice(4)?.first_chunk::<4>()?;
                Some(Some(u32::from_be_bytes(*s)))
            }
            _ => None,
        }
    }

    fn bool(&mut self) -> Option<Option<bool>> {
        match self.byte()? {
            0x40 => Some(None),
            0x41 => Some(Some(true)),
            0x42 => Some(Some(false)),
            0x56 => Some(Some(self.byte()? != 0)),
            _ => None,
        }
    }

    fn ubyte(&mut self) -> Option<Option<u8>> {
        match self.byte()? {
            0x40 => Some(None),
            0x50 => Some(Some(self.byte()?)),
            _ => None,
        }
    }

    fn binary(&mut self) -> Option<Option<Bytes>> {
        match self.byte()? {
            0x40 => Some(None),
            0xa0 => {
                let n = usize::from(self.byte()?);
                let start = self.pos;
                self.slice(n)?;
                Some(Some(self.buf.slice(start..self.pos)))
            }
            _ => None,
        }
    }

    /// A delivery state: null, accepted or released (empty lists); others fall back.
    fn state(&mut self) -> Option<Option<DeliveryState>> {
        match self.byte()? {
            0x40 => return Some(None),
            0x00 => {}
            _ => return None,
        }
        if self.byte()? != 0x53 {
            return None;
        }
        let state = match self.byte()? {
            0x24 => DeliveryState::Accepted,
            0x26 => DeliveryState::Released,
            _ => return None,
        };
        match self.byte()? {
            0x45 => {}
            0xc0 => {
                // An empty list8: size 1, count 0.
                if self.byte()? != 1 || self.byte()? != 0 {
                    return None;
                }
            }
            _ => return None,
        }
        Some(Some(state))
    }
}

/// The field list after the 3-byte descriptor: (field count, first field's offset, offset past
/// the list). Only list0 and list8, the encodings a hot performative comes in; `None` for a
/// list32 or a size that overruns `body`, which the general decoder then judges.
#[inline]
fn field_list(body: &Bytes) -> Option<(usize, usize, usize)> {
    match *body.get(3)? {
        0x45 => Some((0, 4, 4)),
        0xc0 => {
            let size = usize::from(*body.get(4)?);
            let count = usize::from(*body.get(5)?);
            if size < 1 || count > size || 5 + size > body.len() {
                return None;
            }
            Some((count, 6, 5 + size))
        }
        _ => None,
    }
}

/// Decodes a transfer or disposition at the start of `body` (a frame body), returning the
/// performative and the bytes it took; `None` when the general decoder must be used.
pub fn decode_hot(body: &Bytes) -> Option<(Performative, usize)> {
    let &[0x00, 0x53, which] = body.first_chunk::<3>()? else {
        return None;
    };
    let which = u64::from(which);
    if which != code::TRANSFER && which != code::DISPOSITION {
        return None;
    }
    let (count, start, end) = field_list(body)?;
    let mut c = Cursor {
        buf: body,
        pos: start,
        end,
    };
    let mut left = count;
    // Reads the next field with `read`, or `None` (absent) past the last.
    macro_rules! field {
        ($read:ident) => {
            if left == 0 {
                None
            } else {
                left -= 1;
                c.$read()?
            }
        };
    }
    let performative = if which == code::TRANSFER {
        if count > 11 {
            return None;
        }
        let handle = field!(u32)?;
        Performative::Transfer(Transfer {
            handle,
            delivery_id: field!(u32),
            delivery_tag: field!(binary),
            message_format: field!(u32),
            settled: field!(bool),
            more: field!(bool).unwrap_or(false),
            rcv_settle_mode: field!(ubyte),
            state: field!(state),
            resume: field!(bool).unwrap_or(false),
            aborted: field!(bool).unwrap_or(false),
            batchable: field!(bool).unwrap_or(false),
        })
    } else {
        if count > 6 {
            return None;
        }
        let role = field!(bool)?;
        let first = field!(u32)?;
        Performative::Disposition(Disposition {
            role,
            first,
            last: field!(u32),
            settled: field!(bool).unwrap_or(false),
            state: field!(state),
            batchable: field!(bool).unwrap_or(false),
        })
    };
    if left != 0 || c.pos != end {
        return None;
    }
    Some((performative, end))
}

// ---- encoding ----

#[derive(Clone, Copy)]
enum F<'a> {
    Null,
    Bool(bool),
    Ubyte(u8),
    Uint(u32),
    Binary(&'a [u8]),
    /// An outcome with no fields (accepted, released): its descriptor code.
    Empty(u8),
}

impl F<'_> {
    fn len(self) -> usize {
        match self {
            F::Null | F::Bool(_) | F::Uint(0) => 1,
            F::Ubyte(_) => 2,
            F::Uint(1..=255) => 2,
            F::Uint(_) => 5,
            F::Binary(b) => 2 + b.len(),
            F::Empty(_) => 4,
        }
    }

    fn put(self, out: &mut BytesMut) {
        match self {
            F::Null => out.put_u8(0x40),
            F::Bool(true) => out.put_u8(0x41),
            F::Bool(false) => out.put_u8(0x42),
            F::Ubyte(v) => out.put_slice(&[0x50, v]),
            F::Uint(0) => out.put_u8(0x43),
            F::Uint(v @ 1..=255) => out.put_slice(&[0x52, v as u8]),
            F::Uint(v) => {
                out.put_u8(0x70);
                out.put_u32(v);
            }
            F::Binary(b) => {
                out.put_slice(&[0xa0, b.len() as u8]);
                out.put_slice(b);
            }
            F::Empty(code) => out.put_slice(&[0x00, 0x53, code, 0x45]),
        }
    }
}

fn opt_uint(v: Option<u32>) -> F<'static> {
    v.map_or(F::Null, F::Uint)
}

fn flag(v: bool) -> F<'static> {
    if v {
        F::Bool(true)
    } else {
        F::Null
    }
}

fn state(s: &Option<DeliveryState>) -> Option<F<'static>> {
    match s {
        None => Some(F::Null),
        Some(DeliveryState::Accepted) => Some(F::Empty(code::ACCEPTED as u8)),
        Some(DeliveryState::Released) => Some(F::Empty(code::RELEASED as u8)),
        Some(_) => None,
    }
}

/// The fields of a transfer or disposition, `None` when the general encoder must be used.
/// Returns the descriptor code, the fields and how many there are (trailing nulls dropped).
fn hot_fields(p: &Performative) -> Option<(u8, [F<'_>; 11], usize)> {
    let f: [F<'_>; 11];
    let (which, n) = match p {
        Performative::Transfer(t) => {
            let tag = match &t.delivery_tag {
                None => F::Null,
                Some(b) if b.len() <= TAG_MAX => F::Binary(b),
                Some(_) => return None,
            };
            f = [
                F::Uint(t.handle),
                opt_uint(t.delivery_id),
                tag,
                opt_uint(t.message_format),
                t.settled.map_or(F::Null, F::Bool),
                flag(t.more),
                t.rcv_settle_mode.map_or(F::Null, F::Ubyte),
                state(&t.state)?,
                flag(t.resume),
                flag(t.aborted),
                flag(t.batchable),
            ];
            (code::TRANSFER as u8, 11)
        }
        Performative::Disposition(d) => {
            f = [
                F::Bool(d.role),
                F::Uint(d.first),
                opt_uint(d.last),
                F::Bool(d.settled),
                state(&d.state)?,
                flag(d.batchable),
                F::Null,
                F::Null,
                F::Null,
                F::Null,
                F::Null,
            ];
            (code::DISPOSITION as u8, 6)
        }
        _ => return None,
    };
    let mut n = n;
    while n > 0 && matches!(f.get(n - 1), Some(F::Null)) {
        n -= 1;
    }
    Some((which, f, n))
}

/// Encodes a transfer or disposition as the general encoder would; `false` (nothing
/// written) when it must be used instead.
pub fn encode_hot(p: &Performative, out: &mut BytesMut) -> bool {
    let Some((which, f, n)) = hot_fields(p) else {
        return false;
    };
    out.put_slice(&[0x00, 0x53, which]);
    if n == 0 {
        out.put_u8(0x45);
        return true;
    }
    let body: usize = f.iter().take(n).map(|x| x.len()).sum();
    out.put_slice(&[0xc0, (body + 1) as u8, n as u8]);
    for x in f.iter().take(n) {
        x.put(out);
    }
    true
}

/// The size `encode_hot` writes, `None` when it would fall back.
pub fn encoded_len_hot(p: &Performative) -> Option<usize> {
    let (_, f, n) = hot_fields(p)?;
    if n == 0 {
        return Some(4);
    }
    Some(3 + 3 + f.iter().take(n).map(|x| x.len()).sum::<usize>())
}

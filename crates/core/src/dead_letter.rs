//! Dead-letter history: the annotations behind the `x-death` header (RabbitMQ's
//! `rabbit_dead_letter` and `mc:record_death`), and the copy a queue republishes.
//!
//! One entry per (queue, reason), newest first: a message that dies again in the same queue for
//! the same reason bumps that entry's `count` and moves it to the front, keeping the exchange,
//! routing keys and time of the first such death, as RabbitMQ does. The number of entries is
//! bounded by the number of queues times the three reasons.
//!
//! Only deaths recorded by this broker count: an `x-death` header set by a publisher is the
//! publisher's data, as in RabbitMQ 4.0 (3.x parsed it).

use std::sync::Arc;

use bytes::Bytes;

use crate::message::Message;

/// Why a message was dead-lettered (the `reason` of `x-death`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeathReason {
    /// basic.reject / basic.nack with requeue=false.
    Rejected,
    /// Its TTL ran out.
    Expired,
    /// Dropped by a length limit.
    Maxlen,
}

impl DeathReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DeathReason::Rejected => "rejected",
            DeathReason::Expired => "expired",
            DeathReason::Maxlen => "maxlen",
        }
    }

    fn code(self) -> u8 {
        match self {
            DeathReason::Rejected => 1,
            DeathReason::Expired => 2,
            DeathReason::Maxlen => 3,
        }
    }

    fn from_code(code: u8) -> Option<DeathReason> {
        match code {
            1 => Some(DeathReason::Rejected),
            2 => Some(DeathReason::Expired),
            3 => Some(DeathReason::Maxlen),
            _ => None,
        }
    }
}

/// One element of `x-death`.
#[derive(Debug, Clone, PartialEq)]
pub struct Death {
    pub queue: Arc<str>,
    pub reason: DeathReason,
    pub count: u64,
    /// The exchange and routing keys the message had when it first died here for this reason.
    pub exchange: Bytes,
    pub routing_keys: Vec<Bytes>,
    /// Seconds since the epoch of that first death.
    pub time: u64,
    /// The message's `expiration` property then (removed from the dead-lettered copy).
    pub original_expiration: Option<u32>,
}

/// The whole history, plus the `x-first-death-*` and `x-last-death-*` facts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Deaths {
    /// Newest first.
    pub entries: Vec<Death>,
    /// Queue, reason and exchange of the very first death; never changes.
    pub first: Option<(Arc<str>, DeathReason, Bytes)>,
    /// Exchange the message had when it died last.
    pub last_exchange: Bytes,
}

impl Deaths {
    /// Adds a death: a new entry in front, or the (queue, reason) entry bumped to the front.
    pub fn record(&mut self, death: Death) {
        if self.first.is_none() {
            self.first = Some((death.queue.clone(), death.reason, death.exchange.clone()));
        }
        self.last_exchange = death.exchange.clone();
        let same = |d: &Death| d.queue == death.queue && d.reason == death.reason;
        match self.entries.iter().position(same) {
            Some(at) => {
                let mut entry = self.entries.remove(at);
                entry.count = entry.count.saturating_add(1);
                self.entries.insert(0, entry);
            }
            None => self.entries.insert(0, death),
        }
    }

    /// RabbitMQ's cycle rule: routing to `queue` closes a cycle when the message already died
    /// there and no death since (that one included) was a rejection, i.e. the loop is fully
    /// automatic and would go on forever.
    pub fn is_cycle(&self, queue: &str) -> bool {
        let Some(at) = self.entries.iter().position(|d| &*d.queue == queue) else {
            return false;
        };
        self.entries[..=at]
            .iter()
            .all(|d| d.reason != DeathReason::Rejected)
    }

    /// `count:u16le`, then per entry `queue:short reason:u8 count:u64le exchange:short
    /// keys:u16le key:short* time:u64le expiration:u32le (u32::MAX = none)`, then
    /// `first_queue:short first_reason:u8 first_exchange:short last_exchange:short`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let count = self.entries.len().min(usize::from(u16::MAX));
        out.extend_from_slice(&(count as u16).to_le_bytes());
        for death in self.entries.iter().take(count) {
            put_short(out, death.queue.as_bytes());
            out.push(death.reason.code());
            out.extend_from_slice(&death.count.to_le_bytes());
            put_short(out, &death.exchange);
            let keys = death.routing_keys.len().min(usize::from(u16::MAX));
            out.extend_from_slice(&(keys as u16).to_le_bytes());
            for key in death.routing_keys.iter().take(keys) {
                put_short(out, key);
            }
            out.extend_from_slice(&death.time.to_le_bytes());
            let expiration = death.original_expiration.unwrap_or(u32::MAX);
            out.extend_from_slice(&expiration.to_le_bytes());
        }
        let (queue, reason, exchange) = match &self.first {
            Some((q, r, e)) => (q.as_bytes(), r.code(), &e[..]),
            None => (&[][..], 0, &[][..]),
        };
        put_short(out, queue);
        out.push(reason);
        put_short(out, exchange);
        put_short(out, &self.last_exchange);
    }

    /// Reads what `encode` wrote; `None` when the bytes are not that.
    pub fn decode(bytes: &[u8]) -> Option<Deaths> {
        let mut r = Reader { bytes, at: 0 };
        let count = r.u16()?;
        let mut deaths = Deaths::default();
        for _ in 0..count {
            let queue = Arc::from(std::str::from_utf8(r.short()?).ok()?);
            let reason = DeathReason::from_code(r.u8()?)?;
            let count = r.u64()?;
            let exchange = Bytes::copy_from_slice(r.short()?);
            let keys = r.u16()?;
            let routing_keys = (0..keys)
                .map(|_| r.short().map(Bytes::copy_from_slice))
                .collect::<Option<Vec<_>>>()?;
            let time = r.u64()?;
            let expiration = r.u32()?;
            deaths.entries.push(Death {
                queue,
                reason,
                count,
                exchange,
                routing_keys,
                time,
                original_expiration: (expiration != u32::MAX).then_some(expiration),
            });
        }
        let queue = std::str::from_utf8(r.short()?).ok()?;
        let reason = r.u8()?;
        let exchange = Bytes::copy_from_slice(r.short()?);
        if let Some(reason) = DeathReason::from_code(reason) {
            deaths.first = Some((Arc::from(queue), reason, exchange));
        }
        deaths.last_exchange = Bytes::copy_from_slice(r.short()?);
        Some(deaths)
    }
}

/// The copy of `message` that queue `queue` republishes to `exchange`: its death recorded, its
/// `expiration` dropped (so it does not expire again), its routing key replaced when the queue
/// has a dead-letter routing key. `now_secs` is the time of death.
pub fn dead_letter_copy(
    message: &Message,
    reason: DeathReason,
    queue: &Arc<str>,
    exchange: &Arc<str>,
    routing_key: Option<&Arc<str>>,
    now_secs: u64,
) -> Message {
    let mut deaths = message.deaths.as_deref().cloned().unwrap_or_default();
    deaths.record(Death {
        queue: queue.clone(),
        reason,
        count: 1,
        exchange: message.exchange.clone(),
        routing_keys: vec![message.routing_key.clone()],
        time: now_secs,
        original_expiration: message.expiration_ms,
    });
    let routing_key = match routing_key {
        Some(key) => Bytes::copy_from_slice(key.as_bytes()),
        None => message.routing_key.clone(),
    };
    Message {
        format: message.format,
        exchange: Bytes::copy_from_slice(exchange.as_bytes()),
        routing_key,
        properties: message.properties.clone(),
        body: message.body.clone(),
        persistent: message.persistent,
        priority: message.priority,
        expiration_ms: None,
        deaths: Some(Arc::new(deaths)),
    }
}

fn put_short(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = bytes.len().min(255);
    out.push(len as u8);
    out.extend_from_slice(&bytes[..len]);
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let out = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(out)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn short(&mut self) -> Option<&'a [u8]> {
        let len = self.u8()?;
        self.take(usize::from(len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn death(queue: &str, reason: DeathReason) -> Death {
        Death {
            queue: Arc::from(queue),
            reason,
            count: 1,
            exchange: Bytes::new(),
            routing_keys: vec![Bytes::from_static(b"k")],
            time: 1,
            original_expiration: None,
        }
    }

    #[test]
    fn a_repeated_death_bumps_its_entry_to_the_front() {
        let mut deaths = Deaths::default();
        deaths.record(death("a", DeathReason::Rejected));
        deaths.record(death("b", DeathReason::Expired));
        deaths.record(death("a", DeathReason::Rejected));
        let order: Vec<(&str, u64)> = deaths
            .entries
            .iter()
            .map(|d| (&*d.queue, d.count))
            .collect();
        assert_eq!(order, [("a", 2), ("b", 1)]);
        assert_eq!(deaths.first.as_ref().map(|f| &*f.0), Some("a"));
    }

    #[test]
    fn only_automatic_cycles_are_cycles() {
        let mut deaths = Deaths::default();
        deaths.record(death("work", DeathReason::Rejected));
        deaths.record(death("retry", DeathReason::Expired));
        assert!(
            !deaths.is_cycle("work"),
            "a rejection in the loop: retry pattern"
        );
        assert!(
            deaths.is_cycle("retry"),
            "retry -> retry without a rejection"
        );
        assert!(!deaths.is_cycle("other"));
        let mut expired = Deaths::default();
        expired.record(death("q", DeathReason::Expired));
        assert!(expired.is_cycle("q"));
    }
}

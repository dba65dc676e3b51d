//! RabbitMQ 4's address format v2: `/exchanges/:exchange/:routing-key`, `/exchanges/:exchange`
//! and `/queues/:queue`, each segment percent-encoded (RFC 3986).

/// Where a message goes, or where a consumer reads from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// An exchange and a fixed routing key (empty for `/exchanges/:exchange`).
    Exchange {
        exchange: String,
        routing_key: String,
    },
    /// A queue, through the default exchange.
    Queue(String),
}

/// Parses a v2 address; the error text says what is wrong, for the client.
pub fn parse(address: &str) -> Result<Address, String> {
    let invalid = || {
        format!(
            "address '{address}' is not in RabbitMQ's address format v2 \
             (/exchanges/:exchange[/:routing-key] or /queues/:queue)"
        )
    };
    if let Some(rest) = address.strip_prefix("/queues/") {
        if rest.is_empty() || rest.contains('/') {
            return Err(invalid());
        }
        return Ok(Address::Queue(percent_decode(rest).ok_or_else(invalid)?));
    }
    let Some(rest) = address.strip_prefix("/exchanges/") else {
        return Err(invalid());
    };
    let mut parts = rest.splitn(2, '/');
    let exchange = percent_decode(parts.next().unwrap_or_default()).ok_or_else(invalid)?;
    let routing_key = match parts.next() {
        None => String::new(),
        Some(key) if key.contains('/') => return Err(invalid()),
        Some(key) => percent_decode(key).ok_or_else(invalid)?,
    };
    if exchange.is_empty() {
        return Err(invalid());
    }
    if exchange == "amq.default" {
        // As RabbitMQ: the default exchange is addressed through /queues/:queue.
        return Err(format!(
            "{}: the default exchange is addressed as /queues/:queue",
            invalid()
        ));
    }
    Ok(Address::Exchange {
        exchange,
        routing_key,
    })
}

/// Percent-decodes one segment of an address or a management node path; `None` for a
/// malformed escape or invalid UTF-8.
pub fn percent_decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while let Some(&b) = bytes.get(at) {
        if b == b'%' {
            let hex = segment.get(at + 1..at + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            at += 3;
        } else {
            out.push(b);
            at += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_addresses_parse() {
        assert_eq!(parse("/queues/orders"), Ok(Address::Queue("orders".into())));
        assert_eq!(parse("/queues/a%2Fb"), Ok(Address::Queue("a/b".into())));
        assert_eq!(
            parse("/exchanges/amq.topic/a.b"),
            Ok(Address::Exchange {
                exchange: "amq.topic".into(),
                routing_key: "a.b".into()
            })
        );
        assert_eq!(
            parse("/exchanges/fan"),
            Ok(Address::Exchange {
                exchange: "fan".into(),
                routing_key: String::new()
            })
        );
        for bad in [
            "orders",
            "/queues/",
            "/queues/a/b",
            "/exchanges/",
            "/exchanges/x/y/z",
            "/queues/%zz",
            "/exchanges/amq.default/q",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}

//! The certificate-expiration health check (RabbitMQ's
//! `rabbit_mgmt_wm_health_check_certificate_expiration`, the HTTP side of
//! `rabbitmq-diagnostics check_certificate_expiration`): every TLS listener's certificate
//! file is read anew, and each certificate in it that expires within the period, is not
//! valid yet, or cannot be read is reported with its listener.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use rustls::pki_types::pem::{PemObject, SectionKind};
use serde_json::{json, Value};
use x509_parser::time::ASN1Time;

use crate::Listener;

const DAY_SECONDS: i64 = 86_400;

/// `{within}` `{unit}` as seconds, with RabbitMQ's units (a month is a twelfth of 365 days)
/// and errors.
pub fn period_seconds(within: &str, unit: &str) -> Result<i64, &'static str> {
    let within: i64 = within.parse().map_err(|_| "Invalid expiration value.")?;
    let unit_seconds = match unit.to_lowercase().as_str() {
        "days" => DAY_SECONDS,
        "weeks" => 7 * DAY_SECONDS,
        "months" => 365 * DAY_SECONDS / 12,
        "years" => 365 * DAY_SECONDS,
        _ => return Err("Time unit not recognised. Supported units: days, weeks, months, years."),
    };
    within
        .checked_mul(unit_seconds)
        .ok_or("Invalid expiration value.")
}

/// The listeners whose certificates expire within `seconds` from now, as RabbitMQ lists them
/// under `expired`; empty when all is well. The files are read on a blocking thread.
pub async fn expiring(listeners: &[Listener], node: &str, seconds: i64) -> Vec<Value> {
    let (listeners, node) = (listeners.to_vec(), node.to_owned());
    let check = move || expiring_now(&listeners, &node, seconds);
    tokio::task::spawn_blocking(check)
        .await
        .expect("invariant: reading certificate files does not panic")
}

fn expiring_now(listeners: &[Listener], node: &str, seconds: i64) -> Vec<Value> {
    let now = unix_now();
    let deadline = now.saturating_add(seconds);
    let mut expiring = Vec::new();
    for listener in listeners {
        let Some(certfile) = &listener.certfile else {
            continue;
        };
        let expires_on = match std::fs::read(certfile) {
            Ok(pem) => expiring_in(&pem, now, deadline),
            Err(error) => Err(format!("cannot read {}: {error}", certfile.display())),
        };
        let expires_on = match expires_on {
            Ok(dates) if dates.is_empty() => continue,
            Ok(dates) => Value::from(dates),
            Err(reason) => json!({"error": reason}),
        };
        expiring.push(entry(listener, certfile, node, expires_on));
    }
    expiring
}

fn entry(listener: &Listener, certfile: &Path, node: &str, expires_on: Value) -> Value {
    json!({
        "node": node,
        "protocol": listener.protocol,
        "interface": listener.addr.ip().to_string(),
        "port": listener.addr.port(),
        "certfile": certfile.display().to_string(),
        // Warren's listeners do not name the CA file they trust here; RabbitMQ's key stays.
        "cacertfile": Value::Null,
        "certfile_expires_on": expires_on,
        "cacertfile_expires_on": [],
    })
}

/// Each certificate of `pem` that is not valid yet (an error, as RabbitMQ) or expires before
/// `deadline`: its expiry date, or an error string for an entry that is not a readable
/// certificate. `Err` when the file has no PEM entry at all.
fn expiring_in(pem: &[u8], now: i64, deadline: i64) -> Result<Vec<Value>, String> {
    let mut found = 0_usize;
    let mut expiring = Vec::new();
    for section in <(SectionKind, Vec<u8>)>::pem_slice_iter(pem) {
        found += 1;
        let (kind, der) = match section {
            Ok(section) => section,
            Err(error) => {
                // The rest of the file cannot be trusted to parse either.
                expiring.push(json!({"error": format!("unreadable PEM entry: {error}")}));
                break;
            }
        };
        if kind != SectionKind::Certificate {
            let reason = format!("The certificate file provided contains a {kind:?} entry");
            expiring.push(json!({"error": reason}));
            continue;
        }
        match x509_parser::parse_x509_certificate(&der) {
            Ok((_, certificate)) => {
                let validity = certificate.validity();
                if validity.not_before.timestamp() > now {
                    expiring.push(json!({"error": "Certificate is not yet valid"}));
                } else if validity.not_after.timestamp() < deadline {
                    expiring.push(Value::from(date_time(validity.not_after)));
                }
            }
            Err(error) => expiring.push(json!({"error": format!("bad certificate: {error}")})),
        }
    }
    if found == 0 {
        return Err("The certificate file provided does not contain any PEM entry.".into());
    }
    Ok(expiring)
}

/// RabbitMQ's `seconds_to_bin`: `2031-02-03 4:05:06` (UTC; the hour is not padded).
fn date_time(time: ASN1Time) -> String {
    let at = time.to_datetime();
    format!(
        "{}-{:02}-{:02} {}:{:02}:{:02}",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    )
}

fn unix_now() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_secs()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_are_rabbitmqs() {
        assert_eq!(period_seconds("1", "weeks"), Ok(604_800));
        assert_eq!(period_seconds("1", "Months"), Ok(2_628_000));
        assert_eq!(period_seconds("2", "years"), Ok(63_072_000));
        assert_eq!(
            period_seconds("two", "weeks"),
            Err("Invalid expiration value.")
        );
        assert!(period_seconds("2", "week")
            .unwrap_err()
            .contains("Supported units"));
    }

    #[test]
    fn a_file_without_pem_is_an_error() {
        let error = expiring_in(b"not a certificate", 0, 1).unwrap_err();
        assert!(error.contains("does not contain any PEM entry"), "{error}");
    }

    #[test]
    fn dates_are_formatted_as_rabbitmq() {
        let time = ASN1Time::from_timestamp(1_612_325_106).unwrap(); // 2021-02-03 04:05:06 UTC
        assert_eq!(date_time(time), "2021-02-03 4:05:06");
    }
}

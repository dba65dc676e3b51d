//! Salted password hashes in RabbitMQ's format, so a definitions file exported from RabbitMQ
//! imports with its passwords working: `base64(salt ++ H(salt ++ password))` with a 4-byte
//! random salt, H named by `hashing_algorithm` (`rabbit_password_hashing_sha256` by default).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::Digest;

const SALT_BYTES: usize = 4;

/// The hash functions RabbitMQ's internal user database knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum HashingAlgorithm {
    #[default]
    #[serde(rename = "rabbit_password_hashing_sha256")]
    Sha256,
    #[serde(rename = "rabbit_password_hashing_sha512")]
    Sha512,
    #[serde(rename = "rabbit_password_hashing_md5")]
    Md5,
}

impl HashingAlgorithm {
    fn digest(self, salt: &[u8], password: &[u8]) -> Vec<u8> {
        match self {
            HashingAlgorithm::Sha256 => sha2::Sha256::new()
                .chain_update(salt)
                .chain_update(password)
                .finalize()
                .to_vec(),
            HashingAlgorithm::Sha512 => sha2::Sha512::new()
                .chain_update(salt)
                .chain_update(password)
                .finalize()
                .to_vec(),
            HashingAlgorithm::Md5 => md5::Md5::new()
                .chain_update(salt)
                .chain_update(password)
                .finalize()
                .to_vec(),
        }
    }
}

/// Hashes `password` with a fresh random salt; the result is what `password_hash` holds.
pub fn hash_password(algorithm: HashingAlgorithm, password: &str) -> String {
    let salt: [u8; SALT_BYTES] = std::array::from_fn(|_| fastrand::u8(..));
    let mut salted = salt.to_vec();
    salted.extend(algorithm.digest(&salt, password.as_bytes()));
    STANDARD.encode(salted)
}

/// Whether `password` matches `password_hash`. An empty or undecodable hash matches nothing:
/// RabbitMQ's way of a user who may not log in with a password.
pub fn verify_password(algorithm: HashingAlgorithm, password_hash: &str, password: &str) -> bool {
    let Ok(decoded) = STANDARD.decode(password_hash) else {
        return false;
    };
    if decoded.len() <= SALT_BYTES {
        return false;
    }
    let (salt, expected) = decoded.split_at(SALT_BYTES);
    let actual = algorithm.digest(salt, password.as_bytes());
    // Compare every byte, so the time taken says nothing about where they differ.
    actual.len() == expected.len()
        && actual
            .iter()
            .zip(expected)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// Checks that an imported hash is well-formed base64 holding a salt and a digest.
pub fn validate_hash(algorithm: HashingAlgorithm, password_hash: &str) -> Result<(), String> {
    if password_hash.is_empty() {
        return Ok(());
    }
    let decoded = STANDARD
        .decode(password_hash)
        .map_err(|error| format!("password_hash is not base64: {error}"))?;
    let digest_len = algorithm.digest(&[], b"").len();
    if decoded.len() != SALT_BYTES + digest_len {
        return Err(format!(
            "password_hash holds {} bytes; {algorithm:?} needs {}: a {SALT_BYTES}-byte salt \
             and a {digest_len}-byte digest",
            decoded.len(),
            SALT_BYTES + digest_len
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rabbitmqctl add_user alice s3cret` on RabbitMQ 3.10.8, exported with
    /// `rabbitmqctl export_definitions`.
    const RABBITMQ_ALICE: &str = "WzEuGDlx06Z/o2mxPWCcglSt4C3fkjr9b985lgeO4g6N6vqC";

    #[test]
    fn verifies_a_hash_made_by_rabbitmq() {
        assert!(verify_password(
            HashingAlgorithm::Sha256,
            RABBITMQ_ALICE,
            "s3cret"
        ));
        assert!(!verify_password(
            HashingAlgorithm::Sha256,
            RABBITMQ_ALICE,
            "s3cret "
        ));
        assert!(!verify_password(
            HashingAlgorithm::Sha512,
            RABBITMQ_ALICE,
            "s3cret"
        ));
    }

    #[test]
    fn hashes_round_trip_with_fresh_salts() {
        for algorithm in [
            HashingAlgorithm::Sha256,
            HashingAlgorithm::Sha512,
            HashingAlgorithm::Md5,
        ] {
            let a = hash_password(algorithm, "pw");
            let b = hash_password(algorithm, "pw");
            assert_ne!(a, b, "each hash has its own salt");
            assert!(verify_password(algorithm, &a, "pw"));
            assert!(!verify_password(algorithm, &a, "pW"));
            validate_hash(algorithm, &a).unwrap();
        }
    }

    #[test]
    fn empty_or_garbage_hashes_match_nothing() {
        assert!(!verify_password(HashingAlgorithm::Sha256, "", ""));
        assert!(!verify_password(HashingAlgorithm::Sha256, "!!!", "x"));
        assert!(validate_hash(HashingAlgorithm::Sha256, "AAAA").is_err());
        assert!(validate_hash(HashingAlgorithm::Sha256, "").is_ok());
    }
}

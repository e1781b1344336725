//! Password hashes as RabbitMQ keeps them (`rabbit_password`): a 4-byte random salt followed by
//! `H(salt ++ utf8 password)`, base64-encoded in definitions (`password_hash`), with the
//! algorithm named by `hashing_algorithm` (`rabbit_password_hashing_sha256`, the default, or
//! `rabbit_password_hashing_sha512`). Hashes exported by RabbitMQ import as they are and the
//! same passwords log in.

use base64::Engine;
use sha2::{Digest, Sha256, Sha512};

/// The hashing algorithms RabbitMQ names in definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashAlg {
    /// `rabbit_password_hashing_sha256` (default).
    Sha256,
    /// `rabbit_password_hashing_sha512`.
    Sha512,
}

impl HashAlg {
    /// The name used in definitions.
    pub fn name(self) -> &'static str {
        match self {
            HashAlg::Sha256 => "rabbit_password_hashing_sha256",
            HashAlg::Sha512 => "rabbit_password_hashing_sha512",
        }
    }

    /// Parses a definitions name (`None`: unsupported, e.g. md5).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "rabbit_password_hashing_sha256" | "sha256" => Some(HashAlg::Sha256),
            "rabbit_password_hashing_sha512" | "sha512" => Some(HashAlg::Sha512),
            _ => None,
        }
    }

    fn digest(self, salt: &[u8], password: &[u8]) -> Vec<u8> {
        match self {
            HashAlg::Sha256 => {
                let mut h = Sha256::new();
                h.update(salt);
                h.update(password);
                h.finalize().to_vec()
            }
            HashAlg::Sha512 => {
                let mut h = Sha512::new();
                h.update(salt);
                h.update(password);
                h.finalize().to_vec()
            }
        }
    }
}

/// A salted password hash (empty: the user cannot log in with a password).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswordHash {
    /// Algorithm.
    pub alg: HashAlg,
    /// Salt (4 bytes) followed by the digest; empty for no password.
    pub bytes: Vec<u8>,
}

/// A `password_hash` that is not valid base64.
#[derive(Debug, Clone, thiserror::Error)]
#[error("invalid password_hash")]
pub struct BadHash;

impl PasswordHash {
    /// Hashes `password` with a new random salt.
    pub fn new(alg: HashAlg, password: &str) -> Self {
        let salt: [u8; 4] = rand::random();
        let mut bytes = salt.to_vec();
        bytes.extend(alg.digest(&salt, password.as_bytes()));
        Self { alg, bytes }
    }

    /// No password: logins with a password always fail.
    pub fn none() -> Self {
        Self {
            alg: HashAlg::Sha256,
            bytes: Vec::new(),
        }
    }

    /// From a definitions' base64 `password_hash`.
    pub fn from_base64(alg: HashAlg, text: &str) -> Result<Self, BadHash> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|_| BadHash)?;
        Ok(Self { alg, bytes })
    }

    /// The base64 form for definitions and the API.
    pub fn to_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.bytes)
    }

    /// Whether `password` matches.
    pub fn verify(&self, password: &str) -> bool {
        if self.bytes.len() <= 4 {
            return false;
        }
        let (salt, digest) = self.bytes.split_at(4);
        let computed = self.alg.digest(salt, password.as_bytes());
        // Constant-time comparison.
        computed.len() == digest.len()
            && computed
                .iter()
                .zip(digest)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_a_hash_exported_by_rabbitmq_3_10_8() {
        // `guest`/`guest` from a RabbitMQ 3.10.8 definitions export.
        let h = PasswordHash::from_base64(
            HashAlg::Sha256,
            "FrykPV5f1jMF4y9tlbLG4QT2BS9+nfEQ0JicXLOubhVbaBmL",
        )
        .expect("base64");
        assert!(h.verify("guest"));
        assert!(!h.verify("guest2"));
    }

    #[test]
    fn new_hashes_are_salted_and_round_trip() {
        let a = PasswordHash::new(HashAlg::Sha256, "pw");
        let b = PasswordHash::new(HashAlg::Sha256, "pw");
        assert!(a.verify("pw") && b.verify("pw"));
        assert_eq!(a.bytes.len(), 36);
        let back = PasswordHash::from_base64(HashAlg::Sha256, &a.to_base64()).expect("b64");
        assert!(back.verify("pw"));
        assert!(!PasswordHash::none().verify(""));
        let s = PasswordHash::new(HashAlg::Sha512, "x");
        assert!(s.verify("x") && s.bytes.len() == 68);
    }
}

//! Server-generated queue names: `amq.gen-` followed by 22 URL-safe
//! base64 characters (16 pseudo-random bytes, unpadded), like RabbitMQ's
//! `rabbit_guid:binary(gen_secure(), "amq.gen")`. No I/O: the generator
//! is a SplitMix64 stream the server may seed.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Deterministic pseudo-random name generator.
#[derive(Debug, Clone)]
pub struct NameGen {
    state: u64,
}

impl NameGen {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        NameGen { state: seed }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The next `amq.gen-…` name.
    pub fn next_name(&mut self) -> String {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&self.next_u64().to_be_bytes());
        bytes[8..].copy_from_slice(&self.next_u64().to_be_bytes());
        let mut out = String::with_capacity(30);
        out.push_str("amq.gen-");
        encode_b64url(&bytes, &mut out);
        out
    }
}

/// Unpadded URL-safe base64.
fn encode_b64url(input: &[u8], out: &mut String) {
    let mut bits: u32 = 0;
    let mut nbits = 0;
    for &b in input {
        bits = (bits << 8) | u32::from(b);
        nbits += 8;
        while nbits >= 6 {
            nbits -= 6;
            out.push(char::from(ALPHABET[((bits >> nbits) & 63) as usize]));
        }
    }
    if nbits > 0 {
        out.push(char::from(ALPHABET[((bits << (6 - nbits)) & 63) as usize]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names_are_amq_gen_plus_22_url_safe_chars() {
        let mut g = NameGen::new(42);
        let a = g.next_name();
        let b = g.next_name();
        assert_ne!(a, b);
        let tail = a.strip_prefix("amq.gen-").unwrap_or_default();
        assert_eq!(tail.len(), 22);
        assert!(tail.bytes().all(|c| ALPHABET.contains(&c)));
    }
}

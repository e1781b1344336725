//! Fuzz RawProperties: validate, full decode, fast readers, re-encode.
#![no_main]

use bytes::Bytes;
use charon_protocol::RawProperties;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let raw = RawProperties(Bytes::copy_from_slice(data));
    let valid = raw.validate().is_ok();
    let dm = raw.delivery_mode();
    let exp = raw.expiration().map(<[u8]>::to_vec);
    if let Ok(p) = raw.decode() {
        assert!(valid);
        assert_eq!(dm, *p.delivery_mode());
        assert_eq!(
            exp.as_deref(),
            p.expiration().as_ref().map(|s| s.as_str().as_bytes())
        );
        // Compare bytes, not values: NaN floats in headers are != themselves.
        let again = RawProperties::encode(&p);
        let redecoded = again.decode();
        assert!(redecoded.is_ok());
        if let Ok(p2) = redecoded {
            assert_eq!(RawProperties::encode(&p2), again);
        }
    }
});

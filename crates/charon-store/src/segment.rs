//! Segment files: names (`{id:016x}.wal`) and the 24-byte header
//! (`docs/storage-format.md` §2.1).

/// Segment id (1, 2, ...; never reused).
pub(crate) type SegId = u64;

/// Largest segment id the store uses (its index keeps segment ids as `u32`:
/// `docs/storage-format.md` §7). At one segment a record this is beyond any disk.
pub(crate) const MAX_SEG: SegId = u32::MAX as SegId;
/// Largest segment file (its index keeps record offsets as `u32`). Segments roll over at
/// `segment_size`, which the store caps at [`MAX_SEGMENT_SIZE`]; a record is at most 1 GiB.
pub(crate) const MAX_FILE: u64 = u32::MAX as u64;
/// Largest `segment_size` (a record larger than it still goes alone into a segment).
pub(crate) const MAX_SEGMENT_SIZE: u64 = 1 << 30;

/// Bytes of the segment header.
pub(crate) const SEGMENT_HEADER_LEN: u64 = 24;
const MAGIC: &[u8; 8] = b"CHARONWL";
const VERSION: u32 = 3;
/// Versions read (`docs/storage-format.md` §2.4).
const READS: [u32; 3] = [1, 2, 3];

/// File name of segment `id`.
pub(crate) fn file_name(id: SegId) -> String {
    format!("{id:016x}.wal")
}

/// Segment id of a file name, if it names a segment.
pub(crate) fn parse_name(name: &str) -> Option<SegId> {
    let hex = name.strip_suffix(".wal")?;
    if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

fn header_crc(magic_version: &[u8], first_index: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(magic_version), first_index)
}

/// The header of a segment whose first record will have index
/// `first_index` (every record in it has an index at least that large).
pub(crate) fn header(first_index: u64) -> [u8; SEGMENT_HEADER_LEN as usize] {
    let mut h = [0u8; SEGMENT_HEADER_LEN as usize];
    let mut mv = [0u8; 12];
    for (dst, src) in mv
        .iter_mut()
        .zip(MAGIC.iter().chain(VERSION.to_le_bytes().iter()))
    {
        *dst = *src;
    }
    let first = first_index.to_le_bytes();
    let crc = header_crc(&mv, &first);
    for (dst, src) in h.iter_mut().zip(
        mv.iter()
            .chain(crc.to_le_bytes().iter())
            .chain(first.iter()),
    ) {
        *dst = *src;
    }
    h
}

/// Why a header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BadHeader {
    /// Short or failing its CRC: torn while the segment was being created
    /// (acceptable only for the newest segment).
    Torn,
    /// Intact but not ours: wrong magic or an unsupported version.
    Foreign(&'static str),
}

/// Check a header; `Ok` gives the segment's first index.
pub(crate) fn check_header(h: &[u8]) -> Result<u64, BadHeader> {
    let (Some(mv), Some(crc), Some(first)) = (h.get(..12), h.get(12..16), h.get(16..24)) else {
        return Err(BadHeader::Torn);
    };
    if crc != header_crc(mv, first).to_le_bytes().as_slice() {
        return Err(BadHeader::Torn);
    }
    if mv.get(..8) != Some(MAGIC.as_slice()) {
        return Err(BadHeader::Foreign("bad segment magic"));
    }
    if !READS
        .iter()
        .any(|v| mv.get(8..12) == Some(v.to_le_bytes().as_slice()))
    {
        return Err(BadHeader::Foreign("unsupported segment format version"));
    }
    let first: [u8; 8] = first.try_into().map_err(|_| BadHeader::Torn)?;
    Ok(u64::from_le_bytes(first))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(file_name(0x2a), "000000000000002a.wal");
        assert_eq!(parse_name(&file_name(0x2a)), Some(0x2a));
        assert_eq!(parse_name("2a.wal"), None);
        assert_eq!(parse_name("000000000000002a.tmp"), None);
    }

    #[test]
    fn header_round_trips_and_every_flip_is_caught() {
        let h = header(0x1234_5678_9abc);
        assert_eq!(check_header(&h), Ok(0x1234_5678_9abc));
        for n in 0..h.len() {
            assert_eq!(
                check_header(h.get(..n).unwrap_or(&[])),
                Err(BadHeader::Torn)
            );
        }
        for i in 0..h.len() {
            let mut bad = h;
            if let Some(b) = bad.get_mut(i) {
                *b ^= 0x10;
            }
            assert!(check_header(&bad).is_err(), "flip at {i} not caught");
        }
    }

    #[test]
    fn foreign_headers_are_not_torn() {
        let mut h = header(1);
        // Another version with a valid checksum.
        if let Some(b) = h.get_mut(8) {
            *b = 9;
        }
        let (mv, rest) = h.split_at_mut(12);
        let crc = header_crc(mv, rest.get(4..12).unwrap_or(&[]));
        if let Some(slot) = rest.get_mut(..4) {
            slot.copy_from_slice(&crc.to_le_bytes());
        }
        assert_eq!(
            check_header(&h),
            Err(BadHeader::Foreign("unsupported segment format version"))
        );
    }
}

//! Bounds-checked big-endian reading of AMQP primitive types.
//!
//! Every accessor returns `None` instead of panicking when the input is too
//! short, so the rest of the crate never indexes a slice directly.

/// A forward-only cursor over a byte slice.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Start reading at the beginning of `buf`.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Current offset from the start of the slice.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes not consumed yet.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// `n` bytes, advancing past them.
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let out = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(out)
    }

    /// Skip `n` bytes.
    pub(crate) fn skip(&mut self, n: usize) -> Option<()> {
        self.take(n).map(|_| ())
    }

    /// One octet.
    pub(crate) fn u8(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    /// Big-endian u16.
    pub(crate) fn u16(&mut self) -> Option<u16> {
        let b = self.take(2)?;
        Some(u16::from_be_bytes(b.try_into().ok()?))
    }

    /// Big-endian u32.
    pub(crate) fn u32(&mut self) -> Option<u32> {
        let b = self.take(4)?;
        Some(u32::from_be_bytes(b.try_into().ok()?))
    }

    /// Big-endian u64.
    pub(crate) fn u64(&mut self) -> Option<u64> {
        let b = self.take(8)?;
        Some(u64::from_be_bytes(b.try_into().ok()?))
    }

    /// A short string (u8 length prefix) as raw bytes.
    pub(crate) fn short_str(&mut self) -> Option<&'a [u8]> {
        let len = self.u8()?;
        self.take(usize::from(len))
    }

    /// A long string / table / array body (u32 length prefix) as raw bytes.
    pub(crate) fn long_str(&mut self) -> Option<&'a [u8]> {
        let len = self.u32()?;
        self.take(usize::try_from(len).ok()?)
    }
}

/// Read a big-endian u16 at `at` without a cursor.
pub(crate) fn be_u16_at(buf: &[u8], at: usize) -> Option<u16> {
    let b = buf.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes(b.try_into().ok()?))
}

/// Read a big-endian u32 at `at` without a cursor.
pub(crate) fn be_u32_at(buf: &[u8], at: usize) -> Option<u32> {
    let b = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes(b.try_into().ok()?))
}

/// The whole frame at the start of `buf`, read in place: its channel and payload, if `buf` holds
/// all of it (frame end octet included) and its size is within `frame_max` (0: no limit). The
/// caller has checked the frame type octet.
#[inline]
pub(crate) fn frame_payload_at(buf: &[u8], frame_max: u32, frame_end: u8) -> Option<(u16, &[u8])> {
    let (channel, size) = (be_u16_at(buf, 1)?, be_u32_at(buf, 3)?);
    if frame_max != 0 && size > frame_max {
        return None;
    }
    let end_at = usize::try_from(size).ok()?.checked_add(7)?;
    if *buf.get(end_at)? != frame_end {
        return None;
    }
    Some((channel, buf.get(7..end_at)?))
}

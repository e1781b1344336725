//! Walking encoded field tables in place: a cursor, typed values borrowed from the octets, a
//! table's entries as the decoded `BTreeMap` orders them, and the checks decoding makes.

use std::borrow::Cow;

use charon_protocol::MAX_TABLE_NESTING;

use super::write::{Check, write_value};

/// Octets as UTF-8 text, invalid sequences replaced (`String::from_utf8_lossy`), checked with
/// the fast validation first (the lossy one walks every byte).
pub(super) fn lossy(b: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(b) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(b),
    }
}

/// A cursor over encoded octets.
#[derive(Clone, Copy)]
pub(super) struct Cur<'a>(pub(super) &'a [u8]);

impl<'a> Cur<'a> {
    pub(super) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    pub(super) fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    pub(super) fn u8(&mut self) -> Option<u8> {
        self.array::<1>().map(|[b]| b)
    }

    /// A short string's octets (u8 length).
    pub(super) fn short(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }

    /// A long string's octets (u32 length).
    pub(super) fn long(&mut self) -> Option<&'a [u8]> {
        let n = u32::from_be_bytes(self.array::<4>()?);
        self.take(usize::try_from(n).ok()?)
    }

    /// One typed value: its tag and the octets after it (for `S`, `x`, `F`, `A` without the
    /// length prefix). The tags are those `amq-protocol` reads (RabbitMQ's set plus `U`, `L`).
    pub(super) fn value(&mut self) -> Option<Val<'a>> {
        let tag = self.u8()?;
        let body = match tag {
            b't' | b'b' | b'B' => self.take(1)?,
            b's' | b'U' | b'u' => self.take(2)?,
            b'I' | b'i' | b'f' => self.take(4)?,
            b'l' | b'L' | b'd' | b'T' => self.take(8)?,
            b'D' => self.take(5)?,
            b'V' => &[],
            b'S' | b'x' | b'F' | b'A' => self.long()?,
            _ => return None,
        };
        Some(Val { tag, body })
    }
}

/// One encoded field value: its type tag and octets (length prefix stripped).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Val<'a> {
    pub(super) tag: u8,
    pub(super) body: &'a [u8],
}

pub(super) fn be<const N: usize>(b: &[u8]) -> Option<[u8; N]> {
    b.try_into().ok()
}

impl<'a> Val<'a> {
    /// The value as `extract`'s `text` reads a header: long strings and byte arrays as (lossy)
    /// UTF-8, void as nothing, anything else as its JSON text.
    pub(super) fn text(&self) -> Option<String> {
        match self.tag {
            b'S' | b'x' => Some(lossy(self.body).into_owned()),
            b'V' => None,
            _ => {
                let mut s = Vec::new();
                write_value(&mut s, *self, 1, Check::Each)?;
                String::from_utf8(s).ok()
            }
        }
    }

    /// Whether [`Val::text`] of the value is `want`, without building the text for a string.
    pub(super) fn text_is(&self, want: &str) -> bool {
        match self.tag {
            b'S' | b'x' => lossy(self.body) == want,
            _ => self.text().as_deref() == Some(want),
        }
    }

    /// The value as `extract`'s `int` reads a death count.
    pub(super) fn int(&self) -> Option<i64> {
        let b = self.body;
        Some(match self.tag {
            b'b' => i64::from(i8::from_be_bytes(be(b)?)),
            b'B' => i64::from(u8::from_be_bytes(be(b)?)),
            b's' | b'U' => i64::from(i16::from_be_bytes(be(b)?)),
            b'u' => i64::from(u16::from_be_bytes(be(b)?)),
            b'I' => i64::from(i32::from_be_bytes(be(b)?)),
            b'i' => i64::from(u32::from_be_bytes(be(b)?)),
            b'l' | b'L' => i64::from_be_bytes(be(b)?),
            b'T' => i64::try_from(u64::from_be_bytes(be(b)?)).ok()?,
            _ => return None,
        })
    }

    /// The elements of an array value (`None` for any other type).
    pub(super) fn elements(&self) -> Option<Elements<'a>> {
        (self.tag == b'A').then_some(Elements(Cur(self.body)))
    }

    /// The values of `keys` in a table value as the decoded map has them (of repeated keys the
    /// last), in one pass over the octets: no entry list, no sort, no UTF-8 check of an ASCII
    /// key. `None` for another type, when malformed or when a key is not UTF-8 (as `Val::table`,
    /// which the tests compare it with).
    pub(super) fn table_values<const N: usize>(
        &self,
        keys: [&str; N],
    ) -> Option<[Option<Val<'a>>; N]> {
        if self.tag != b'F' {
            return None;
        }
        let mut out = [None; N];
        let mut c = Cur(self.body);
        while !c.0.is_empty() {
            let k = c.short()?;
            if !k.is_ascii() && std::str::from_utf8(k).is_err() {
                return None;
            }
            let v = c.value()?;
            if let Some(i) = keys.iter().position(|want| want.as_bytes() == k)
                && let Some(slot) = out.get_mut(i)
            {
                *slot = Some(v);
            }
        }
        Some(out)
    }

    /// The entries of a table value (`None` for any other type, or when malformed). Tests only:
    /// the extraction reads tables by [`Val::table_values`] or [`write_table`]'s entries.
    #[cfg(test)]
    pub(super) fn table(&self) -> Option<Vec<Entry<'a>>> {
        if self.tag == b'F' {
            entries(self.body)
        } else {
            None
        }
    }
}

/// The elements of an array body, in order (stops at the first malformed one).
pub(super) struct Elements<'a>(Cur<'a>);

impl<'a> Iterator for Elements<'a> {
    type Item = Val<'a>;
    fn next(&mut self) -> Option<Val<'a>> {
        if self.0.0.is_empty() {
            return None;
        }
        self.0.value()
    }
}

/// A table entry: key (its octets: checked as UTF-8 where the table is written, see
/// [`super::write`]) and value.
pub(crate) type Entry<'a> = (&'a [u8], Val<'a>);

/// The entries of table body `body` as the decoded `BTreeMap` has them: sorted by key (byte
/// order), the last of repeated keys kept. `None` when malformed or a key is not UTF-8. For a
/// table already written by `write_table` (which checks what the map drops, too). Tests only.
#[cfg(test)]
pub(crate) fn entries(body: &[u8]) -> Option<Vec<Entry<'_>>> {
    let es = entries_at(body, None)?;
    es.iter()
        .all(|(k, _)| std::str::from_utf8(k).is_ok())
        .then_some(es)
}

/// [`entries`] without the check of the keys as UTF-8 (the writer makes it, [`super::write`]);
/// with `Some(depth)` (the table's nesting depth) the values of repeated keys that the map drops
/// are checked as decoding checks them (it fails on them all the same).
pub(super) fn entries_at(body: &[u8], depth: Option<usize>) -> Option<Vec<Entry<'_>>> {
    let mut c = Cur(body);
    let mut out: Vec<Entry<'_>> = Vec::with_capacity(16);
    let mut sorted = true;
    while !c.0.is_empty() {
        let key = c.short()?;
        let v = c.value()?;
        sorted &= out.last().is_none_or(|(k, _)| *k < key);
        out.push((key, v));
    }
    if sorted {
        return Some(out);
    }
    // Reversed, then a stable sort: of repeated keys the last comes first and is kept.
    out.reverse();
    out.sort_by(|a, b| a.0.cmp(b.0));
    let mut kept: Vec<Entry<'_>> = Vec::with_capacity(out.len());
    for e in out {
        if kept.last().is_some_and(|k| k.0 == e.0) {
            if let Some(d) = depth
                && !valid(e.1, d)
            {
                return None;
            }
        } else {
            kept.push(e);
        }
    }
    Some(kept)
}

/// Whether value `v` of a table or array at nesting depth `depth` decodes: nested tables' keys
/// UTF-8, well formed, not nested deeper than [`MAX_TABLE_NESTING`].
fn valid(v: Val<'_>, depth: usize) -> bool {
    let depth = depth + 1;
    match v.tag {
        b'F' | b'A' if depth > MAX_TABLE_NESTING => false,
        b'F' => {
            let mut c = Cur(v.body);
            while !c.0.is_empty() {
                let ok = c.short().is_some_and(|k| std::str::from_utf8(k).is_ok())
                    && c.value().is_some_and(|x| valid(x, depth));
                if !ok {
                    return false;
                }
            }
            true
        }
        b'A' => {
            let mut c = Cur(v.body);
            while !c.0.is_empty() {
                if !c.value().is_some_and(|x| valid(x, depth)) {
                    return false;
                }
            }
            true
        }
        _ => true,
    }
}

/// The value of `key` in sorted, de-duplicated `entries`.
pub(super) fn get<'a>(entries: &[Entry<'a>], key: &str) -> Option<Val<'a>> {
    find(entries, key)
        .and_then(|i| entries.get(i))
        .map(|(_, v)| *v)
}

/// The index of `key` in sorted, de-duplicated `entries`.
pub(super) fn find(entries: &[Entry<'_>], key: &str) -> Option<usize> {
    entries
        .binary_search_by(|(k, _)| (*k).cmp(key.as_bytes()))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table body of `(key, value)` entries: each value a long string (`S`).
    fn table(entries: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut b = Vec::new();
        for (k, v) in entries {
            b.push(u8::try_from(k.len()).expect("short key"));
            b.extend_from_slice(k);
            b.push(b'S');
            b.extend_from_slice(&u32::try_from(v.len()).expect("short value").to_be_bytes());
            b.extend_from_slice(v);
        }
        b
    }

    /// What `table_values` must give: `table` and `get`, the sorted map's reading.
    fn by_map<const N: usize>(v: Val<'_>, keys: [&str; N]) -> Option<[Option<Vec<u8>>; N]> {
        let es = v.table()?;
        Some(keys.map(|k| get(&es, k).map(|x| x.body.to_vec())))
    }

    fn by_pass<const N: usize>(v: Val<'_>, keys: [&str; N]) -> Option<[Option<Vec<u8>>; N]> {
        Some(v.table_values(keys)?.map(|x| x.map(|x| x.body.to_vec())))
    }

    #[test]
    fn table_values_read_as_the_map_does() {
        let keys = ["count", "queue", "reason", "routing-keys"];
        let bodies = [
            table(&[(b"queue", b"q1"), (b"reason", b"rejected")]),
            // Unsorted, repeated (the last is kept), a key read that is absent.
            table(&[
                (b"reason", b"a"),
                (b"queue", b"q1"),
                (b"reason", b"b"),
                (b"queue", b"q2"),
            ]),
            // A key that is not UTF-8: the map cannot be built, neither can the values.
            table(&[(b"queue", b"q1"), (b"\xff\xfe", b"x")]),
            // A UTF-8 key that is not ASCII is read as any other.
            table(&[("é".as_bytes(), b"x"), (b"count", b"c")]),
            Vec::new(),
        ];
        for body in &bodies {
            let v = Val { tag: b'F', body };
            assert_eq!(by_pass(v, keys), by_map(v, keys), "{body:?}");
        }
        let table_of = |body| Val { tag: b'F', body };
        assert_eq!(by_pass(table_of(&bodies[2]), keys), None);
        let b1 = by_pass(table_of(&bodies[1]), keys).expect("a table");
        assert_eq!(b1[1].as_deref(), Some(&b"q2"[..]));
        assert_eq!(b1[2].as_deref(), Some(&b"b"[..]));
        // Malformed (cut short) and not a table: no values.
        let cut = &bodies[1][..bodies[1].len() - 1];
        assert_eq!(by_pass(table_of(cut), keys), None);
        assert_eq!(by_map(table_of(cut), keys), None);
        let string = Val {
            tag: b'S',
            body: &bodies[0],
        };
        assert_eq!(by_pass(string, keys), None);
    }
}

//! Erlang term formatting for reply texts: RabbitMQ 3.10.8 writes the
//! octets of a bad frame with `io_lib:format("~p")` / `("~w")`, and clients
//! (and the acceptance tests) see those texts verbatim.
//!
//! Only what reply texts need: binaries, and the "type T, all octets = …"
//! snippet of `rabbit_reader:payload_snippet/1`. Line wrapping of very long
//! terms (`~p` breaks lines at column 80) is not reproduced.

/// How many payload octets a frame-error text shows (`payload_snippet/1`).
pub const SNIPPET_LEN: usize = 16;

/// Erlang `~w` of a binary: always the octets, `<<0,1,2>>`.
pub fn binary_w(bytes: &[u8]) -> String {
    let items: Vec<String> = bytes.iter().map(u8::to_string).collect();
    format!("<<{}>>", items.join(","))
}

/// Erlang `~p` of a binary: `<<"abc">>` when every octet is printable
/// Latin-1 (`io_lib:printable_latin1_list/1`), otherwise the octets.
pub fn binary_p(bytes: &[u8]) -> String {
    if bytes.is_empty() || !bytes.iter().all(|b| printable_latin1(*b)) {
        return binary_w(bytes);
    }
    format!("<<{}>>", quoted(bytes.iter().copied()))
}

/// Erlang `~p` of a string (a list of characters): `"abc"`, with the same
/// escapes as [`binary_p`]. Non-printable input falls back to the list of
/// character codes, as Erlang prints it.
pub fn string_p(s: &str) -> String {
    let latin1: Option<Vec<u8>> = s
        .chars()
        .map(|c| u8::try_from(c).ok().filter(|b| printable_latin1(*b)))
        .collect();
    match latin1 {
        Some(b) if b.is_empty() => "[]".to_string(),
        Some(b) => quoted(b.into_iter()),
        None => {
            let codes: Vec<String> = s.chars().map(|c| u32::from(c).to_string()).collect();
            format!("[{}]", codes.join(","))
        }
    }
}

/// `"..."` with Erlang's escapes; every octet must be printable Latin-1.
fn quoted(bytes: impl Iterator<Item = u8>) -> String {
    let mut s = String::from("\"");
    for b in bytes {
        match b {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            b'\t' => s.push_str("\\t"),
            0x0B => s.push_str("\\v"),
            0x08 => s.push_str("\\b"),
            0x0C => s.push_str("\\f"),
            0x1B => s.push_str("\\e"),
            other => s.push(char::from(other)),
        }
    }
    s.push('"');
    s
}

fn printable_latin1(b: u8) -> bool {
    matches!(b, 0x20..=0x7E | 0xA0..=0xFF | b'\n' | b'\r' | b'\t' | 0x0B | 0x08 | 0x0C | 0x1B)
}

/// The first [`SNIPPET_LEN`] octets of a payload (all of a short one).
pub fn snippet(payload: &[u8]) -> Vec<u8> {
    payload.iter().take(SNIPPET_LEN).copied().collect()
}

/// `type T, all octets = <<...>>` (or `first 16 octets` when the payload
/// of `size` octets was longer), as `rabbit_reader` describes a frame it
/// refuses. `head` is the payload's [`snippet`].
pub fn frame_octets(frame_type: u8, size: usize, head: &[u8]) -> String {
    let which = if size <= SNIPPET_LEN {
        "all"
    } else {
        "first 16"
    };
    format!("type {frame_type}, {which} octets = {}", binary_p(head))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binaries_print_like_erlang() {
        assert_eq!(binary_p(b""), "<<>>");
        assert_eq!(binary_p(b"abc"), "<<\"abc\">>");
        assert_eq!(binary_p(&[0, 20, 0, 10, 1, 48]), "<<0,20,0,10,1,48>>");
        assert_eq!(binary_p(b"a\"b\n"), "<<\"a\\\"b\\n\">>");
        assert_eq!(binary_w(b"abc"), "<<97,98,99>>");
        assert_eq!(binary_w(&[0]), "<<0>>");
    }

    #[test]
    fn strings_print_like_erlang() {
        assert_eq!(string_p("abc"), "\"abc\"");
        assert_eq!(string_p(""), "[]");
        assert_eq!(string_p("a\u{1}"), "[97,1]");
    }

    #[test]
    fn frame_snippets() {
        assert_eq!(
            frame_octets(9, 3, b"abc"),
            "type 9, all octets = <<\"abc\">>"
        );
        let long = [1u8; 20];
        assert_eq!(
            frame_octets(1, long.len(), &snippet(&long)),
            format!("type 1, first 16 octets = {}", binary_w(&[1u8; 16]))
        );
    }
}

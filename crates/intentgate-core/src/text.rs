//! Caller text made safe to show: control characters escaped, lengths bounded.
//!
//! Tool names, keys, reasons and error messages come from callers and config files. Shown on
//! a terminal or stored in a bounded column they must stay one line and one entry, and never
//! send escape sequences; these helpers are the one place that rule is written.

/// `text` with control characters escaped (`\n`, `\u{1b}`), so a key or a message stays on
/// its line and can't repaint a terminal.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// `text` cut to at most `limit` bytes, at a character boundary.
pub fn cut(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(printable("a\nb\u{1b}[31m"), "a\\nb\\u{1b}[31m");
        assert_eq!(printable("plain é"), "plain é");
    }

    #[test]
    fn cuts_at_a_character_boundary() {
        assert_eq!(cut("abcdef", 4), "abcd");
        assert_eq!(cut("abc", 4), "abc");
        // `é` is two bytes: a cut inside it backs off to before it.
        assert_eq!(cut("aé", 2), "a");
    }
}

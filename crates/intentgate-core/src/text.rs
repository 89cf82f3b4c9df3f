//! Caller text made safe to show: control characters escaped, lengths bounded.
//!
//! Tool names, keys, reasons and error messages come from callers and config files. Shown on
//! a terminal or stored in a bounded column they must stay one line and one entry, and never
//! send escape sequences; these helpers are the one place that rule is written.
//!
//! Argument text also has one spelling here. What a person reads as one value may be
//! written several ways: `é` composed (U+00E9) or as `e` and a combining accent, with an
//! invisible character such as a zero-width joiner inside, or in a compatibility form such
//! as fullwidth `１`. [`nfc_strings`] writes every string in Unicode's composed form (NFC),
//! which changes no character's meaning, so keys and fingerprints see one spelling and the
//! provider is sent the same one. [`hidden_character`] and [`compatibility_character`] find
//! what NFC keeps but a key must not hold: the key template refuses them, since two keys
//! that look alike but differ would be two intents and two effects.

use std::borrow::Cow;

use serde_json::Value;
use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfc_quick};

/// `text` in Unicode's composed normal form (NFC), borrowed when it is already.
pub fn nfc(text: &str) -> Cow<'_, str> {
    // ASCII text is in every normal form; most arguments are.
    if text.is_ascii() || is_nfc_quick(text.chars()) == IsNormalized::Yes {
        return Cow::Borrowed(text);
    }
    let composed: String = text.nfc().collect();
    if composed == text {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(composed)
    }
}

/// `value` with every string value in NFC ([`nfc`]); member names are kept as written (the
/// input schema names them). Numbers, booleans and nulls are untouched.
pub fn nfc_strings(mut value: Value) -> Value {
    compose_strings(&mut value);
    value
}

/// [`nfc_strings`] in place: only a string that changes is replaced, and no array or map
/// is built again.
fn compose_strings(value: &mut Value) {
    match value {
        Value::String(text) => {
            if let Cow::Owned(composed) = nfc(text) {
                *text = composed;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(compose_strings),
        Value::Object(members) => members.values_mut().for_each(compose_strings),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// True for a character that is invisible or changes the direction of the text around it:
/// Unicode's default-ignorable code points (zero-width spaces and joiners, the soft hyphen,
/// variation selectors, fillers, tags; unassigned ones of those blocks included, as Unicode
/// reserves them) and the bidirectional controls (U+061C, U+200E, U+200F, U+202A to U+202E,
/// U+2066 to U+2069), which are all default-ignorable too. The table is Unicode 16's
/// `Default_Ignorable_Code_Point` from DerivedCoreProperties.txt.
pub fn is_hidden(c: char) -> bool {
    matches!(
        c as u32,
        0x00AD
            | 0x034F
            | 0x061C
            | 0x115F..=0x1160
            | 0x17B4..=0x17B5
            | 0x180B..=0x180F
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x206F
            | 0x3164
            | 0xFE00..=0xFE0F
            | 0xFEFF
            | 0xFFA0
            | 0xFFF0..=0xFFF8
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0000..=0xE0FFF
    )
}

/// The first invisible or direction-changing character of `text` ([`is_hidden`]), if any.
pub fn hidden_character(text: &str) -> Option<char> {
    text.chars().find(|c| is_hidden(*c))
}

/// The first character of `text` that is a compatibility form of other text (fullwidth
/// `１` of `1`, the ligature `ﬁ` of `fi`, superscript `²` of `2`, a no-break space of a
/// space), with that other text: what NFKC would turn it into. NFC keeps these, and folding
/// them would change the meaning of some (`²` is not `2`), so a key refuses them instead.
pub fn compatibility_character(text: &str) -> Option<(char, String)> {
    // No ASCII character has a compatibility decomposition.
    text.chars().filter(|c| !c.is_ascii()).find_map(|c| {
        let mut one = [0u8; 4];
        let one = c.encode_utf8(&mut one);
        let folded: String = one.nfkc().collect();
        // Against the NFC form: a character NFC already changes is not a compatibility one.
        let composed: String = one.nfc().collect();
        (folded != composed).then_some((c, folded))
    })
}

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
    fn composed_and_decomposed_text_have_one_spelling() {
        let decomposed = "cafe\u{301}";
        assert_eq!(nfc(decomposed), "caf\u{e9}");
        assert!(matches!(nfc("caf\u{e9}"), Cow::Borrowed(_)));
        let arguments = serde_json::json!({"note": decomposed, "items": [decomposed, 49]});
        assert_eq!(
            nfc_strings(arguments),
            serde_json::json!({"note": "caf\u{e9}", "items": ["caf\u{e9}", 49]})
        );
        // NFC folds no compatibility form: fullwidth digits stay as written.
        assert_eq!(nfc("ord_\u{ff11}"), "ord_\u{ff11}");
    }

    #[test]
    fn invisible_and_direction_controls_are_found() {
        for hidden in [
            '\u{200b}',
            '\u{200d}',
            '\u{200e}',
            '\u{202e}',
            '\u{2066}',
            '\u{2069}',
            '\u{061c}',
            '\u{feff}',
            '\u{ad}',
            '\u{34f}',
            '\u{180e}',
            '\u{fe0f}',
            '\u{e0100}',
            '\u{2060}',
        ] {
            assert_eq!(
                hidden_character(&format!("88{hidden}12")),
                Some(hidden),
                "{hidden:?}"
            );
        }
        assert_eq!(hidden_character("plain é 8812 ١٢ 注文"), None);
    }

    #[test]
    fn compatibility_forms_are_found_with_their_plain_text() {
        assert_eq!(
            compatibility_character("ord_\u{ff11}"),
            Some(('\u{ff11}', "1".to_owned()))
        );
        assert_eq!(
            compatibility_character("\u{fb01}le"),
            Some(('\u{fb01}', "fi".to_owned()))
        );
        // Composed or not, an accent is no compatibility form; nor is other script.
        assert_eq!(compatibility_character("café cafe\u{301} 注文 ١٢"), None);
    }

    /// The fast paths of [`nfc`] and [`compatibility_character`] skip ASCII: no ASCII
    /// character changes under NFC or NFKC.
    #[test]
    fn ascii_is_in_every_normal_form() {
        for byte in 0u8..=0x7f {
            let one = char::from(byte).to_string();
            assert_eq!(one.nfc().collect::<String>(), one, "{byte:#x}");
            assert_eq!(one.nfkc().collect::<String>(), one, "{byte:#x}");
        }
        let nested = serde_json::json!({"a": [{"b": "cafe\u{301}"}, "x"], "c": true});
        assert_eq!(
            nfc_strings(nested),
            serde_json::json!({"a": [{"b": "caf\u{e9}"}, "x"], "c": true})
        );
    }

    #[test]
    fn cuts_at_a_character_boundary() {
        assert_eq!(cut("abcdef", 4), "abcd");
        assert_eq!(cut("abc", 4), "abc");
        // `é` is two bytes: a cut inside it backs off to before it.
        assert_eq!(cut("aé", 2), "a");
    }
}

//! Bytes as lowercase hex: digests and random tokens, written on every call.

/// `bytes` as lowercase hex, two digits a byte, from a table: no formatting machinery or
/// allocation per byte.
pub fn lower_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        hex.push(char::from(DIGITS[usize::from(byte >> 4)]));
        hex.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_is_two_lowercase_digits_as_format_writes_them() {
        let bytes: Vec<u8> = (0..=255).collect();
        let formatted: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
        assert_eq!(lower_hex(&bytes), formatted);
        assert_eq!(lower_hex(&[]), "");
    }
}

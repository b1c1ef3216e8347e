//! GPT-2 byte-level alphabet: every byte is written as one printable char.
//! Printable Latin-1 bytes stand for themselves; the other 68 bytes map, in
//! order, to U+0100.. (so byte 0 is 'Ā' and the space byte is 'Ġ').

use std::sync::OnceLock;

/// The byte a byte-level char stands for, or `None` for chars outside the
/// alphabet (added tokens are stored as plain text).
pub fn byte_of(c: char) -> Option<u8> {
    static TABLE: OnceLock<[i16; 324]> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t = [-1i16; 324];
        let mut n = 0usize;
        for b in 0u16..=255 {
            let printable = (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
            if printable {
                t[b as usize] = b as i16;
            } else {
                t[256 + n] = b as i16;
                n += 1;
            }
        }
        t
    });
    let i = c as usize;
    table.get(i).and_then(|&b| u8::try_from(b).ok())
}

/// The char that stands for `byte` (the inverse of [`byte_of`]).
pub fn char_of(byte: u8) -> char {
    let b = byte as u32;
    let printable = (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    if printable {
        return char::from_u32(b).unwrap_or('?');
    }
    // The n-th non-printable byte maps to U+0100 + n.
    let n = (0..b).filter(|&x| !((33..=126).contains(&x) || (161..=172).contains(&x) || (174..=255).contains(&x))).count() as u32;
    char::from_u32(256 + n).unwrap_or('?')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alphabet() {
        assert_eq!(byte_of('Ā'), Some(0));
        assert_eq!(byte_of('Ġ'), Some(b' '));
        assert_eq!(byte_of('Ċ'), Some(b'\n'));
        assert_eq!(byte_of('a'), Some(b'a'));
        assert_eq!(byte_of('é'), Some(0xe9));
        assert_eq!(byte_of('Ń'), Some(0xad));
        assert_eq!(byte_of(' '), None);
        assert_eq!(byte_of('中'), None);
        let mapped = (0u32..400).filter_map(char::from_u32).filter(|c| byte_of(*c).is_some()).count();
        assert_eq!(mapped, 256);
        for b in 0..=255u8 {
            assert_eq!(byte_of(char_of(b)), Some(b));
        }
    }
}

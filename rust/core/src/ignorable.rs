//! Default-ignorable code points: invisible characters that must not change what a word is.
//!
//! A soft hyphen (U+00AD) or a zero-width space (U+200B) inside "Robin\u{AD}son" is invisible
//! to a reader, so "Robinson" must stay one word, and one term, everywhere phisieve cuts
//! words (index, marker, encode, detection rules). These characters are transparent to the
//! word splitter (a word continues across them) and removed from normalised terms; offsets
//! still point into the original text.
//!
//! The table is Unicode's `Default_Ignorable_Code_Point` property (DerivedCoreProperties.txt,
//! Unicode 15.1, unchanged in 16.0); the Python tests check it against the `regex` module's
//! `\p{Default_Ignorable_Code_Point}`.

/// Inclusive ranges of `Default_Ignorable_Code_Point`, sorted.
const RANGES: &[(u32, u32)] = &[
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
];

/// Whether `c` is a default-ignorable code point (never ASCII).
#[inline]
pub fn is_ignorable(c: char) -> bool {
    let c = c as u32;
    if c < 0xAD {
        return false;
    }
    RANGES
        .binary_search_by(|&(lo, hi)| {
            if hi < c {
                std::cmp::Ordering::Less
            } else if lo > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// Whether `text` holds any default-ignorable code point (a fast scan for ASCII text).
#[inline]
pub fn has_ignorable(text: &str) -> bool {
    !text.is_ascii() && text.chars().any(is_ignorable)
}

/// `text` without its default-ignorable code points, and for every byte of the result the
/// byte offset it came from in `text` (plus one entry for the end).
pub struct Stripped {
    pub text: String,
    origin: Vec<usize>,
}

impl Stripped {
    /// Strip `text`; `None` when it has nothing to strip.
    pub fn new(text: &str) -> Option<Self> {
        if !has_ignorable(text) {
            return None;
        }
        let mut out = String::with_capacity(text.len());
        let mut origin = Vec::with_capacity(text.len() + 1);
        for (i, c) in text.char_indices() {
            if is_ignorable(c) {
                continue;
            }
            out.push(c);
            origin.extend(i..i + c.len_utf8());
        }
        origin.push(text.len());
        Some(Self { text: out, origin })
    }

    /// The byte offset in the original text of the character starting at byte `b` of the
    /// stripped text (the original's end for the stripped text's end).
    #[inline]
    pub fn start(&self, b: usize) -> usize {
        self.origin[b]
    }

    /// The byte offset in the original text just after the character ending at byte `b` of
    /// the stripped text (so a span never takes in ignorable characters around it).
    #[inline]
    pub fn end(&self, b: usize) -> usize {
        if b == 0 {
            self.origin[0]
        } else {
            self.origin[b - 1] + 1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_disjoint() {
        for w in RANGES.windows(2) {
            assert!(w[0].0 <= w[0].1 && w[0].1 < w[1].0, "{w:?}");
        }
    }

    #[test]
    fn known_code_points() {
        for c in [
            '\u{AD}',
            '\u{200B}',
            '\u{200D}',
            '\u{2060}',
            '\u{FEFF}',
            '\u{E0001}',
        ] {
            assert!(is_ignorable(c), "{:04X}", c as u32);
        }
        for c in [
            'a', ' ', '-', '\u{AC}', '\u{AE}', '\u{2010}', '\u{2011}', 'é', '\u{301}',
        ] {
            assert!(!is_ignorable(c), "{:04X}", c as u32);
        }
    }

    #[test]
    fn stripped_offsets_point_into_the_original() {
        assert!(Stripped::new("plain ascii").is_none());
        assert!(Stripped::new("Zoë").is_none());
        let text = "Dr \u{200B}Robin\u{AD}son\u{200B}, é";
        let s = Stripped::new(text).unwrap();
        assert_eq!(s.text, "Dr Robinson, é");
        let b = s.text.find("Robinson").unwrap();
        let (start, end) = (s.start(b), s.end(b + "Robinson".len()));
        assert_eq!(&text[start..end], "Robin\u{AD}son");
        assert_eq!(s.start(s.text.len()), text.len());
        assert_eq!(s.end(s.text.len()), text.len());
    }
}

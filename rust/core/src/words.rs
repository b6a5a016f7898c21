//! Words: maximal runs of Unicode letters, combining marks and digits.
//!
//! A character is a word character when its Unicode general category is a Letter (`L*`),
//! a Mark (`M*`, so decomposed accents stay inside their word) or a Number (`N*`). Everything
//! else (punctuation, symbols, separators, controls) separates words. ASCII takes a fast path.

use unicode_general_category::{get_general_category, GeneralCategory as G};

/// Whether `c` belongs to a word.
#[inline]
pub fn is_word_char(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphanumeric();
    }
    matches!(
        get_general_category(c),
        G::UppercaseLetter
            | G::LowercaseLetter
            | G::TitlecaseLetter
            | G::ModifierLetter
            | G::OtherLetter
            | G::NonspacingMark
            | G::SpacingMark
            | G::EnclosingMark
            | G::DecimalNumber
            | G::LetterNumber
            | G::OtherNumber
    )
}

/// A word of a text, by byte offsets (for slicing in Rust) and code-point offsets (the
/// offsets Python's `str` uses). Ends are exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WordSpan {
    pub byte_start: usize,
    pub byte_end: usize,
    pub char_start: usize,
    pub char_end: usize,
}

/// Calls `f(byte_start, byte_end)` for every word of `text`, in order.
#[inline]
pub fn for_each_word(text: &str, mut f: impl FnMut(usize, usize)) {
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut start: Option<usize> = None;
    while i < bytes.len() {
        let b = bytes[i];
        let (is_word, len) = if b < 0x80 {
            (b.is_ascii_alphanumeric(), 1)
        } else {
            // SAFETY of indexing: `i` is always at a char boundary.
            let c = text[i..].chars().next().expect("char at boundary");
            (is_word_char(c), c.len_utf8())
        };
        match (is_word, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                f(s, i);
                start = None;
            }
            _ => {}
        }
        i += len;
    }
    if let Some(s) = start {
        f(s, bytes.len());
    }
}

/// Every word of `text` with byte and code-point offsets.
pub fn word_spans(text: &str) -> Vec<WordSpan> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut cp = 0;
    let mut start: Option<(usize, usize)> = None;
    while i < bytes.len() {
        let b = bytes[i];
        let (is_word, len) = if b < 0x80 {
            (b.is_ascii_alphanumeric(), 1)
        } else {
            let c = text[i..].chars().next().expect("char at boundary");
            (is_word_char(c), c.len_utf8())
        };
        match (is_word, start) {
            (true, None) => start = Some((i, cp)),
            (false, Some((bs, cs))) => {
                out.push(WordSpan {
                    byte_start: bs,
                    byte_end: i,
                    char_start: cs,
                    char_end: cp,
                });
                start = None;
            }
            _ => {}
        }
        i += len;
        cp += 1;
    }
    if let Some((bs, cs)) = start {
        out.push(WordSpan {
            byte_start: bs,
            byte_end: bytes.len(),
            char_start: cs,
            char_end: cp,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<&str> {
        word_spans(text)
            .iter()
            .map(|w| &text[w.byte_start..w.byte_end])
            .collect()
    }

    #[test]
    fn ascii_punctuation_splits() {
        assert_eq!(
            words("Dupont, 7/22 s/p MI-1992."),
            ["Dupont", "7", "22", "s", "p", "MI", "1992"]
        );
        assert_eq!(words(""), Vec::<&str>::new());
        assert_eq!(words("  ,,; "), Vec::<&str>::new());
        assert_eq!(words("a_b"), ["a", "b"]);
    }

    #[test]
    fn unicode_words_and_code_point_offsets() {
        let text = "Zoë—Müller 北京 cafe\u{301}!";
        let spans = word_spans(text);
        let got: Vec<_> = spans.iter().map(|w| (w.char_start, w.char_end)).collect();
        assert_eq!(got, [(0, 3), (4, 10), (11, 13), (14, 19)]);
        assert_eq!(words(text), ["Zoë", "Müller", "北京", "cafe\u{301}"]);
    }

    #[test]
    fn for_each_word_matches_word_spans() {
        let text = "x1 ÿ; ½ ⅷ Ⅻ. end";
        let mut a = Vec::new();
        for_each_word(text, |s, e| a.push((s, e)));
        let b: Vec<_> = word_spans(text)
            .iter()
            .map(|w| (w.byte_start, w.byte_end))
            .collect();
        assert_eq!(a, b);
    }
}

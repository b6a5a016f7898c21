//! Words: maximal runs of Unicode letters, combining marks and digits.
//!
//! A character is a word character when its Unicode general category is a Letter (`L*`),
//! a Mark (`M*`, so decomposed accents stay inside their word) or a Number (`N*`). Everything
//! else (punctuation, symbols, separators, controls) separates words, except the
//! default-ignorable code points (soft hyphen, zero-width space...), across which a word
//! continues (see [`crate::ignorable`]). ASCII takes a fast path.

use crate::ignorable::is_ignorable;
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

/// How a character takes part in words.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Word,
    /// A default-ignorable code point: a word continues across it, none starts or ends on it.
    Ignorable,
    Separator,
}

#[inline]
fn class_at(text: &str, i: usize) -> (Class, usize) {
    let b = text.as_bytes()[i];
    if b < 0x80 {
        let class = if b.is_ascii_alphanumeric() {
            Class::Word
        } else {
            Class::Separator
        };
        return (class, 1);
    }
    // `i` is always at a char boundary.
    let c = text[i..].chars().next().expect("char at boundary");
    let class = if is_word_char(c) {
        Class::Word
    } else if is_ignorable(c) {
        Class::Ignorable
    } else {
        Class::Separator
    };
    (class, c.len_utf8())
}

/// Calls `f(byte_start, byte_end, char_start, char_end)` for every word of `text`, in order.
/// A word never starts or ends on a default-ignorable code point but continues across one.
#[inline]
fn scan(text: &str, mut f: impl FnMut(usize, usize, usize, usize)) {
    let n = text.len();
    let (mut i, mut cp) = (0, 0);
    // The open word's start, and the end of its last word character (bytes, code points).
    let mut open: Option<(usize, usize)> = None;
    let (mut last_b, mut last_c) = (0, 0);
    while i < n {
        let (class, len) = class_at(text, i);
        match class {
            Class::Word => {
                if open.is_none() {
                    open = Some((i, cp));
                }
                (last_b, last_c) = (i + len, cp + 1);
            }
            Class::Ignorable => {}
            Class::Separator => {
                if let Some((bs, cs)) = open.take() {
                    f(bs, last_b, cs, last_c);
                }
            }
        }
        i += len;
        cp += 1;
    }
    if let Some((bs, cs)) = open {
        f(bs, last_b, cs, last_c);
    }
}

/// Calls `f(byte_start, byte_end)` for every word of `text`, in order.
#[inline]
pub fn for_each_word(text: &str, mut f: impl FnMut(usize, usize)) {
    scan(text, |bs, be, _, _| f(bs, be));
}

/// Every word of `text` with byte and code-point offsets.
pub fn word_spans(text: &str) -> Vec<WordSpan> {
    let mut out = Vec::new();
    scan(text, |byte_start, byte_end, char_start, char_end| {
        out.push(WordSpan {
            byte_start,
            byte_end,
            char_start,
            char_end,
        })
    });
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
    fn ignorable_code_points_do_not_split_words() {
        let text = "\u{200B}Robin\u{AD}son\u{AD} J\u{200D}o \u{FEFF}\u{AD}, x";
        assert_eq!(words(text), ["Robin\u{AD}son", "J\u{200D}o", "x"]);
        let got: Vec<_> = word_spans(text)
            .iter()
            .map(|w| (w.char_start, w.char_end))
            .collect();
        assert_eq!(got, [(1, 10), (12, 15), (20, 21)]);
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

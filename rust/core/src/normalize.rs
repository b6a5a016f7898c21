//! Term normalisation: a Unicode normal form, then lower-case.
//!
//! A normalised word never contains U+0020: compatibility decompositions that produce a space
//! (e.g. NFKC of U+037A) have it removed, so the space can join words into n-gram terms
//! unambiguously. ASCII words take a fast path (ASCII is stable under every normal form).

use crate::error::{CoreError, Result};
use crate::ignorable::is_ignorable;
use crate::vocab::Term;
use unicode_normalization::UnicodeNormalization;

/// The Unicode normal form applied before lower-casing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    None,
    Nfc,
    Nfkc,
}

/// How words become terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Normalizer {
    pub form: Form,
    pub lowercase: bool,
}

impl Default for Normalizer {
    fn default() -> Self {
        Self {
            form: Form::Nfkc,
            lowercase: true,
        }
    }
}

impl Normalizer {
    /// Parse a normaliser name: `nfkc_lower` (default), `nfkc`, `nfc_lower`, `nfc`, `lower`,
    /// `none`.
    pub fn parse(name: &str) -> Result<Self> {
        let (form, lowercase) = match name {
            "nfkc_lower" => (Form::Nfkc, true),
            "nfkc" => (Form::Nfkc, false),
            "nfc_lower" => (Form::Nfc, true),
            "nfc" => (Form::Nfc, false),
            "lower" => (Form::None, true),
            "none" => (Form::None, false),
            other => {
                return Err(CoreError::InvalidArgument(format!(
                    "unknown normalisation {other:?}; expected one of nfkc_lower, nfkc, \
                     nfc_lower, nfc, lower, none"
                )))
            }
        };
        Ok(Self { form, lowercase })
    }

    /// Append the normalised form of `word` to `out` (which is not cleared).
    #[inline]
    pub fn normalize_into(&self, word: &str, out: &mut String) {
        if word.is_ascii() {
            let start = out.len();
            out.push_str(word);
            if self.lowercase {
                out[start..].make_ascii_lowercase();
            }
            return;
        }
        // Default-ignorable code points go before the normal form (so they cannot block a
        // composition) and after it (a compatibility mapping may produce one).
        let visible = word.chars().filter(|&c| !is_ignorable(c));
        let formed: String = match self.form {
            Form::None => visible.collect(),
            Form::Nfc => visible.nfc().collect(),
            Form::Nfkc => visible.nfkc().collect(),
        };
        let cased = if self.lowercase {
            formed.to_lowercase()
        } else {
            formed
        };
        out.extend(cased.chars().filter(|&c| c != ' ' && !is_ignorable(c)));
    }

    /// The normalised form of `word`.
    pub fn normalize(&self, word: &str) -> String {
        let mut s = String::with_capacity(word.len());
        self.normalize_into(word, &mut s);
        s
    }
}

/// Per ASCII byte: 0 for a separator, else the byte a word keeps (lower-cased in `LOWER`).
/// Bytes >= 0x80 map to `NON_ASCII`.
const NON_ASCII: u8 = 0xff;

const fn byte_classes(lowercase: bool) -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = if c >= 0x80 {
            NON_ASCII
        } else if c.is_ascii_alphanumeric() {
            if lowercase {
                c.to_ascii_lowercase()
            } else {
                c
            }
        } else {
            0
        };
        b += 1;
    }
    t
}

static LOWER: [u8; 256] = byte_classes(true);
static KEEP: [u8; 256] = byte_classes(false);

/// Calls `f` with the normalised form of every word of `text`, in order, hashed for vocabulary
/// look-ups (`buf` is scratch).
///
/// Equivalent to normalising each word of [`crate::words::for_each_word`]. All-ASCII words,
/// the common case of clinical text, take one pass over their bytes; those of up to 7 bytes
/// are hashed from a register without being copied.
#[inline]
pub fn for_each_term(
    text: &str,
    norm: &Normalizer,
    buf: &mut String,
    mut f: impl FnMut(&Term<'_>),
) {
    let class = if norm.lowercase { &LOWER } else { &KEEP };
    let bytes = text.as_bytes();
    let n = bytes.len();
    let mut i = 0;
    while i < n {
        let c = class[bytes[i] as usize];
        if c == 0 {
            i += 1;
            continue;
        }
        let start = i;
        if c != NON_ASCII {
            // ASCII word characters; the first 7 (normalised) go into a register.
            let mut acc: u64 = 0;
            loop {
                let c = class[bytes[i] as usize];
                if c == 0 || c == NON_ASCII {
                    break;
                }
                let len = i - start;
                if len < 8 {
                    acc |= (c as u64) << (8 * len);
                }
                i += 1;
                if i == n {
                    break;
                }
            }
            if i == n || bytes[i] < 0x80 {
                // An all-ASCII word.
                let len = i - start;
                if len <= 7 {
                    let w = acc.to_le_bytes();
                    // SAFETY: the bytes are ASCII word characters, hence UTF-8.
                    let s = unsafe { std::str::from_utf8_unchecked(&w[..len]) };
                    f(&Term::short(s, acc));
                } else {
                    buf.clear();
                    buf.push_str(&text[start..i]);
                    if norm.lowercase {
                        buf.make_ascii_lowercase();
                    }
                    f(&Term::new(buf));
                }
                continue;
            }
        }
        // A non-ASCII character: the word (if any) continues by the general rule, across
        // default-ignorable code points but ending on its last word character.
        let mut end = i;
        let mut pos = i;
        let mut word_start = (start < i).then_some(start);
        for ch in text[i..].chars() {
            if crate::words::is_word_char(ch) {
                word_start.get_or_insert(pos);
                end = pos + ch.len_utf8();
            } else if !is_ignorable(ch) {
                break;
            }
            pos += ch.len_utf8();
        }
        if let Some(ws) = word_start {
            buf.clear();
            norm.normalize_into(&text[ws..end], buf);
            f(&Term::new(buf));
            i = end;
        } else {
            // Ignorable characters before a separator, or one separator: skip them all.
            i = pos.max(i + text[i..].chars().next().map_or(1, char::len_utf8));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fold_case_and_compatibility() {
        let n = Normalizer::default();
        assert_eq!(n.normalize("Dupont"), "dupont");
        assert_eq!(n.normalize("ＤＵＰＯＮＴ"), "dupont");
        assert_eq!(n.normalize("ﬁbrosis"), "fibrosis");
        assert_eq!(n.normalize("ΟΔΟΣ"), "οδος");
        assert_eq!(n.normalize("\u{37a}"), "\u{345}");
        assert_eq!(n.normalize("Robin\u{AD}son"), "robinson");
        assert_eq!(n.normalize("Robin\u{200B}SON"), "robinson");
        assert_eq!(
            Normalizer::parse("none").unwrap().normalize("Ro\u{AD}b"),
            "Rob"
        );
        assert_eq!(
            Normalizer::parse("nfc")
                .unwrap()
                .normalize("e\u{200B}\u{301}"),
            "é"
        );
    }

    #[test]
    fn for_each_term_matches_words_then_normalize() {
        let n = Normalizer::default();
        for text in [
            "",
            "Pt Zoë—MÜLLER, 7/22 café\u{301}; ½ ⅷ x",
            "ÉCOLE",
            "a\u{2014}",
            "—",
            "ab—cd",
            "ABCDEFG abcdefgh Abcdefghijklmno x9 9",
            "12345678é",
            "Robin\u{AD}son \u{200B}Dupont\u{200B}, \u{AD}\u{AD} ab\u{FEFF}",
            "\u{AD}\u{AD}\u{AD}",
            "Ｒｏｂｉｎ\u{AD}ｓｏｎ",
        ] {
            let mut want = Vec::new();
            crate::words::for_each_word(text, |s, e| want.push(n.normalize(&text[s..e])));
            let mut got = Vec::new();
            let mut buf = String::new();
            for_each_term(text, &n, &mut buf, |t| {
                assert_eq!(t.hash, Term::new(t.text).hash);
                got.push(t.text.to_owned())
            });
            assert_eq!(got, want, "{text:?}");
        }
    }

    #[test]
    fn parse_names() {
        assert_eq!(Normalizer::parse("none").unwrap().normalize("Ab"), "Ab");
        assert_eq!(Normalizer::parse("lower").unwrap().normalize("ＡB"), "ａb");
        assert!(Normalizer::parse("bogus").is_err());
    }
}

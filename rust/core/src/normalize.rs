//! Term normalisation: a Unicode normal form, then lower-case.
//!
//! A normalised word never contains U+0020: compatibility decompositions that produce a space
//! (e.g. NFKC of U+037A) have it removed, so the space can join words into n-gram terms
//! unambiguously. ASCII words take a fast path (ASCII is stable under every normal form).

use crate::error::{CoreError, Result};
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
        let formed: String = match self.form {
            Form::None => word.to_owned(),
            Form::Nfc => word.nfc().collect(),
            Form::Nfkc => word.nfkc().collect(),
        };
        let cased = if self.lowercase {
            formed.to_lowercase()
        } else {
            formed
        };
        out.extend(cased.chars().filter(|&c| c != ' '));
    }

    /// The normalised form of `word`.
    pub fn normalize(&self, word: &str) -> String {
        let mut s = String::with_capacity(word.len());
        self.normalize_into(word, &mut s);
        s
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
    }

    #[test]
    fn parse_names() {
        assert_eq!(Normalizer::parse("none").unwrap().normalize("Ab"), "Ab");
        assert_eq!(Normalizer::parse("lower").unwrap().normalize("ＡB"), "ａb");
        assert!(Normalizer::parse("bogus").is_err());
    }
}

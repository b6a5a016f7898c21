//! Packing a patient's documents into model sequences (`phisieve encode`).
//!
//! Documents arrive in order, each as its model tokens with the document-local word each
//! token belongs to (-1 for none) and two flags (direct, indirect). A patient's documents are
//! concatenated, each followed by the document separator when the tokenizer has one, and cut
//! into sequences of at most `capacity` tokens (the model's length less its prefix and
//! suffix). A cut never falls inside a word when the word can start the next sequence
//! instead; a sequence never holds two patients; a sequence without any word is left out
//! (its tokens counted as dropped). Word numbers run over the whole patient while packing, so
//! two documents in one sequence never share a number, and are renumbered 0, 1, 2... per
//! sequence when the sequences are taken.

use crate::error::{CoreError, Result};

/// The special tokens around sequences and documents.
#[derive(Debug, Clone, Default)]
pub struct Special {
    /// Tokens before every sequence (`[CLS]`).
    pub prefix: Vec<u32>,
    /// Tokens after every sequence (`[SEP]`), unless it already ends with the last of them.
    pub suffix: Vec<u32>,
    /// The token after every document (`[SEP]`, `<|endoftext|>`), if any.
    pub doc_end: Option<u32>,
}

/// One sequence being packed or finished.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Packed {
    pub patient: String,
    pub doc_ids: Vec<String>,
    pub ids: Vec<u32>,
    /// Patient-wide word numbers (-1: no word).
    pub words: Vec<i64>,
    pub direct: Vec<bool>,
    pub indirect: Vec<bool>,
    has_word: bool,
}

/// A finished sequence laid out for the model: prefix and suffix added, words numbered
/// 0, 1, 2... within the sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct Laid {
    pub patient: String,
    pub doc_ids: Vec<String>,
    pub ids: Vec<u32>,
    pub words: Vec<i32>,
    pub direct: Vec<bool>,
    pub indirect: Vec<bool>,
}

/// Packs documents into sequences; see the module documentation.
#[derive(Debug, Clone)]
pub struct Packer {
    special: Special,
    capacity: usize,
    current: Option<Packed>,
    done: Vec<Packed>,
    patient: Option<String>,
    next_word: i64,
    /// Tokens left out because the sequence they would have formed holds no word.
    pub dropped_tokens: u64,
}

impl Packer {
    /// A packer for sequences of at most `max_len` tokens, special tokens included.
    pub fn new(max_len: usize, special: Special) -> Result<Self> {
        let capacity = max_len.saturating_sub(special.prefix.len() + special.suffix.len());
        if capacity < 2 {
            return Err(CoreError::InvalidArgument(format!(
                "max_len {max_len} leaves no room for tokens"
            )));
        }
        Ok(Packer {
            special,
            capacity,
            current: None,
            done: Vec::new(),
            patient: None,
            next_word: 0,
            dropped_tokens: 0,
        })
    }

    /// A packer with the same settings that has seen nothing.
    pub fn fresh(&self) -> Self {
        Packer {
            special: self.special.clone(),
            capacity: self.capacity,
            current: None,
            done: Vec::new(),
            patient: None,
            next_word: 0,
            dropped_tokens: 0,
        }
    }

    /// Whether it holds nothing: no sequence being packed or finished.
    pub fn is_empty(&self) -> bool {
        self.current.is_none() && self.done.is_empty()
    }

    /// The number of finished sequences not yet taken.
    pub fn finished(&self) -> usize {
        self.done.len()
    }

    fn emit(&mut self) {
        if let Some(current) = self.current.take() {
            if !current.ids.is_empty() {
                if current.has_word {
                    self.done.push(current);
                } else {
                    self.dropped_tokens += current.ids.len() as u64;
                }
            }
        }
    }

    /// The current patient's last sequence is complete (kept even when short).
    pub fn finish_patient(&mut self) {
        self.emit();
    }

    /// Append one document. `words`, `direct` and `indirect` have one entry per token.
    pub fn add(
        &mut self,
        patient: &str,
        doc_id: &str,
        ids: &[u32],
        words: &[i64],
        direct: &[bool],
        indirect: &[bool],
    ) -> Result<()> {
        let n_tokens = ids.len();
        if words.len() != n_tokens || direct.len() != n_tokens || indirect.len() != n_tokens {
            return Err(CoreError::InvalidArgument(
                "a document's words and flags must have one entry per token".to_string(),
            ));
        }
        if self.patient.as_deref() != Some(patient) {
            self.emit();
            self.patient = Some(patient.to_owned());
            self.next_word = 0;
        }
        if n_tokens == 0 {
            return Ok(()); // a document without tokens adds nothing, not even a separator
        }
        let n_words = words.iter().copied().max().unwrap_or(-1).max(-1) + 1;
        let shift = self.next_word;
        self.next_word += n_words;
        let total = n_tokens + usize::from(self.special.doc_end.is_some());
        let end_id = self.special.doc_end.unwrap_or(0);
        let id = |i: usize| if i < n_tokens { ids[i] } else { end_id };
        let word = |i: usize| {
            if i < n_tokens && words[i] >= 0 {
                words[i] + shift
            } else {
                -1
            }
        };
        let mut start = 0;
        while start < total {
            let current = self.current.get_or_insert_with(|| Packed {
                patient: patient.to_owned(),
                ..Packed::default()
            });
            let room = self.capacity - current.ids.len();
            let mut end = total.min(start + room);
            // Do not cut inside a word when the word can start the next sequence instead.
            if end > start && end < total && word(end) >= 0 && word(end) == word(end - 1) {
                let mut first = end - 1;
                while first > start && word(first - 1) == word(end) {
                    first -= 1;
                }
                if first > start || !current.ids.is_empty() {
                    end = first;
                }
            }
            if end > start {
                for i in start..end {
                    current.ids.push(id(i));
                    let w = word(i);
                    current.words.push(w);
                    current.has_word |= w >= 0;
                    current.direct.push(i < n_tokens && direct[i]);
                    current.indirect.push(i < n_tokens && indirect[i]);
                }
                if current.doc_ids.last().map(String::as_str) != Some(doc_id) {
                    current.doc_ids.push(doc_id.to_owned());
                }
                start = end;
            }
            if start >= n_tokens {
                // Only the separator is left and the sequence is full: the end of the
                // sequence ends the document.
                break;
            }
            self.emit();
        }
        Ok(())
    }

    /// The finished sequences, laid out for the model, in order.
    pub fn take(&mut self) -> Vec<Laid> {
        let sp = &self.special;
        self.done
            .drain(..)
            .map(|s| {
                let pre = sp.prefix.len();
                let ends_with_suffix = !sp.suffix.is_empty() && s.ids.last() == sp.suffix.last();
                let suf = if ends_with_suffix { 0 } else { sp.suffix.len() };
                let mut ids = Vec::with_capacity(pre + s.ids.len() + suf);
                ids.extend_from_slice(&sp.prefix);
                ids.extend_from_slice(&s.ids);
                ids.extend_from_slice(&sp.suffix[..suf]);
                let mut words = vec![-1i32; pre];
                let mut local = -1i32;
                for (i, &w) in s.words.iter().enumerate() {
                    if w < 0 {
                        words.push(-1);
                        continue;
                    }
                    if i == 0 || s.words[i - 1] != w {
                        local += 1;
                    }
                    words.push(local);
                }
                words.resize(words.len() + suf, -1);
                let pad = |flags: &[bool]| {
                    let mut out = vec![false; pre];
                    out.extend_from_slice(flags);
                    out.resize(out.len() + suf, false);
                    out
                };
                Laid {
                    direct: pad(&s.direct),
                    indirect: pad(&s.indirect),
                    patient: s.patient,
                    doc_ids: s.doc_ids,
                    ids,
                    words,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bert() -> Special {
        Special {
            prefix: vec![101],
            suffix: vec![102],
            doc_end: Some(102),
        }
    }

    #[test]
    fn a_word_is_not_cut_when_it_can_start_the_next_sequence() {
        let mut p = Packer::new(6, bert()).unwrap(); // capacity 4
        let f = [false; 5];
        p.add("p", "d", &[1, 2, 3, 4, 5], &[0, 1, 1, 2, 2], &f, &f)
            .unwrap();
        p.finish_patient();
        let out = p.take();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].ids, vec![101, 1, 2, 3, 102]);
        assert_eq!(out[0].words, vec![-1, 0, 1, 1, -1]);
        assert_eq!(out[1].ids, vec![101, 4, 5, 102]); // the separator ends the document
        assert_eq!(out[1].words, vec![-1, 0, 0, -1]);
    }

    #[test]
    fn sequences_without_words_are_dropped_and_counted() {
        let mut p = Packer::new(8, bert()).unwrap();
        let f = [false; 2];
        p.add("p", "d", &[7, 8], &[-1, -1], &f, &f).unwrap();
        p.finish_patient();
        assert!(p.take().is_empty());
        assert_eq!(p.dropped_tokens, 3);
    }

    #[test]
    fn too_short_a_length_is_refused() {
        assert!(Packer::new(3, bert()).is_err());
    }
}

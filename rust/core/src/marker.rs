//! Marking protected words: which words of a text belong to indirect n-grams.
//!
//! A [`Marker`] holds a blacklist of indirect terms (normalised n-grams, words joined by a
//! space, as the index writes them) and marks the words of new text under a [`Policy`]:
//! * [`Policy::All`]: every word of every blacklisted n-gram is protected;
//! * [`Policy::Minimal`]: only the last word of each *minimal* blacklisted n-gram (one with no
//!   blacklisted proper sub-gram) is protected. Because a super-gram of a term used by fewer
//!   than k patients is used by fewer than k patients too, checking the (n-1)-prefix and
//!   (n-1)-suffix is enough.

use crate::error::{CoreError, Result};
use crate::hash::Key;
use crate::normalize::{for_each_term, Normalizer};
use crate::vocab::Vocab;
use crate::MAX_N;
use rustc_hash::FxHashSet;

/// How blacklisted n-grams turn into protected words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    All,
    Minimal,
}

impl Policy {
    /// `all` or `minimal`.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "all" => Ok(Self::All),
            "minimal" => Ok(Self::Minimal),
            other => Err(CoreError::InvalidArgument(format!(
                "unknown n-gram policy {other:?}; expected all or minimal"
            ))),
        }
    }
}

/// A blacklist of n-grams, ready to mark text.
#[derive(Default)]
pub struct Marker {
    vocab: Vocab,
    keys: FxHashSet<Key>,
    max_n: usize,
    normalizer: Normalizer,
}

/// Word counts of a text under both policies.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ProtectedCounts {
    pub words: u64,
    pub all: u64,
    pub minimal: u64,
}

impl Marker {
    /// An empty blacklist for text normalised by `normalizer`.
    pub fn new(normalizer: Normalizer) -> Self {
        Self {
            normalizer,
            ..Default::default()
        }
    }

    /// Blacklist a term: normalised words joined by single spaces (1 to 4 words).
    pub fn insert(&mut self, term: &str) -> Result<()> {
        let mut key: Key = 0;
        let mut n = 0;
        for word in term.split(' ') {
            if n == MAX_N {
                return Err(CoreError::InvalidArgument(format!(
                    "a blacklisted term has more than {MAX_N} words"
                )));
            }
            let id = self.vocab.intern_str(word);
            key |= ((id as u128) + 1) << (32 * n);
            n += 1;
        }
        self.max_n = self.max_n.max(n);
        self.keys.insert(key);
        Ok(())
    }

    /// Number of blacklisted terms.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the blacklist is empty.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// For each word of `text`, and each length n (1-based), whether the n-gram starting
    /// there is blacklisted: `table[i * max_n + n - 1]`. Also returns the word count.
    fn table(&self, text: &str) -> (usize, Vec<bool>) {
        let mut ids: Vec<Option<u32>> = Vec::new();
        let mut buf = String::new();
        for_each_term(text, &self.normalizer, &mut buf, |term| {
            ids.push(self.vocab.find(term));
        });
        let m = self.max_n.max(1);
        let mut table = vec![false; ids.len() * m];
        for i in 0..ids.len() {
            let mut key: Key = 0;
            for n in 0..m.min(ids.len() - i) {
                let Some(id) = ids[i + n] else { break };
                key |= ((id as u128) + 1) << (32 * n);
                table[i * m + n] = self.keys.contains(&key);
            }
        }
        (ids.len(), table)
    }

    /// One flag per word of `text`: whether the policy protects it.
    pub fn mark(&self, text: &str, policy: Policy) -> Vec<bool> {
        let (len, table) = self.table(text);
        self.apply(len, &table, policy)
    }

    fn apply(&self, len: usize, table: &[bool], policy: Policy) -> Vec<bool> {
        let m = self.max_n.max(1);
        let mut out = vec![false; len];
        for i in 0..len {
            for n in 1..=m.min(len - i) {
                if !table[i * m + n - 1] {
                    continue;
                }
                match policy {
                    Policy::All => out[i..i + n].iter_mut().for_each(|f| *f = true),
                    Policy::Minimal => {
                        let minimal =
                            n == 1 || (!table[i * m + n - 2] && !table[(i + 1) * m + n - 2]);
                        if minimal {
                            out[i + n - 1] = true;
                        }
                    }
                }
            }
        }
        out
    }

    /// Words of `text` and how many each policy protects.
    pub fn counts(&self, text: &str) -> ProtectedCounts {
        let (len, table) = self.table(text);
        let count = |p| self.apply(len, &table, p).iter().filter(|&&f| f).count() as u64;
        ProtectedCounts {
            words: len as u64,
            all: count(Policy::All),
            minimal: count(Policy::Minimal),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies() {
        let mut m = Marker::new(Normalizer::default());
        for t in ["dupont", "dupont visited", "chest pain today", "pain today"] {
            m.insert(t).unwrap();
        }
        let text = "Chest pain today; DUPONT visited.";
        assert_eq!(m.mark(text, Policy::All), [true, true, true, true, true]);
        // "pain today" is minimal (its words are not blacklisted), "chest pain today" is not
        // (it contains "pain today"); "dupont visited" contains "dupont".
        assert_eq!(
            m.mark(text, Policy::Minimal),
            [false, false, true, true, false]
        );
        assert_eq!(
            m.counts(text),
            ProtectedCounts {
                words: 5,
                all: 5,
                minimal: 2
            }
        );
        assert_eq!(m.mark("", Policy::All), Vec::<bool>::new());
        assert!(m.insert("a b c d e").is_err());
    }
}

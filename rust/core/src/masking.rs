//! Training labels that never ask a model to predict a protected word (DESIGN.md §4–§6).
//!
//! Input: `encoded` sequences (model token ids, the phisieve word each token belongs to, and
//! per-token flags). Output: padded `input_ids`, `attention_mask` and `labels` rows written
//! straight into caller-owned buffers (numpy arrays or pinned torch tensors on the Python side).
//!
//! * Masked LM: each sequence masks exactly `round(p × eligible words)` whole words, drawn
//!   uniformly without replacement among the words the objective leaves unprotected; every
//!   token of a chosen word gets its label, and is replaced by the mask token, a random token or
//!   kept (80/10/10 by default). Labels are -100 everywhere else.
//! * Causal LM: labels are the input ids, with -100 on protected tokens and padding.
//!
//! Every draw is a pure function of `(seed, epoch, seq_id)`: a sequence gets the same masks
//! whichever batch, worker or thread processes it. The generator is SplitMix64 and bounded
//! draws use Lemire's multiply-and-reject method, so a plain-Python reference reproduces the
//! draws bit for bit (`tests/reference.py`).

use crate::error::{CoreError, Result};
use crate::hash::mix64;

/// The label of a position that is not predicted.
pub const IGNORE: i64 = -100;

/// Which words an objective protects (never predicts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protect {
    /// Nothing (MLM, CLM and their pseudonymised variants).
    Nothing,
    /// Indirect and direct identifiers (PPMLM, PPCLM).
    All,
    /// Direct identifiers only (DPP).
    Direct,
    /// Indirect identifiers only (IPP).
    Indirect,
}

/// How a batch is turned into training rows.
#[derive(Debug, Clone)]
pub struct MaskConfig {
    /// Causal LM labels instead of masked-LM masks.
    pub causal: bool,
    pub protect: Protect,
    /// Share of eligible words to mask (masked LM).
    pub probability: f64,
    /// Of the masked tokens: share replaced by the mask token, share by a random token; the
    /// rest are kept unchanged.
    pub replace_mask: f64,
    pub replace_random: f64,
    pub mask_id: u32,
    pub pad_id: u32,
    /// Random replacement tokens are drawn from `0..vocab_size`.
    pub vocab_size: u32,
    pub seed: u64,
    pub epoch: u64,
}

impl MaskConfig {
    /// Check the numbers a caller can get wrong.
    pub fn validate(&self) -> Result<()> {
        let share = |x: f64| (0.0..=1.0).contains(&x);
        if !share(self.probability) {
            return Err(CoreError::InvalidArgument(format!(
                "mask probability must be in [0, 1], not {}",
                self.probability
            )));
        }
        if !share(self.replace_mask)
            || !share(self.replace_random)
            || self.replace_mask + self.replace_random > 1.0 + 1e-12
        {
            return Err(CoreError::InvalidArgument(format!(
                "replacement shares must be in [0, 1] and sum to at most 1, not {} + {}",
                self.replace_mask, self.replace_random
            )));
        }
        if !self.causal && self.vocab_size == 0 {
            return Err(CoreError::InvalidArgument(
                "vocab_size must be positive".to_string(),
            ));
        }
        Ok(())
    }
}

/// One encoded sequence, as slices of the batch's buffers.
pub struct Sequence<'a, F: Fn(usize) -> bool> {
    pub seq_id: u64,
    pub input_ids: &'a [u32],
    /// Sequence-local word numbers, -1 for tokens outside any word (special tokens,
    /// punctuation). Tokens of one word are consecutive and share the number.
    pub word_ids: &'a [i32],
    /// Whether the objective protects token `i`: the flag column [`Protect::pick`] chose, or
    /// always false when it protects nothing.
    pub protected: F,
}

impl Protect {
    /// Of a sequence's three flag columns (`protected`, `direct`, `indirect`), the one this
    /// protection reads; None when it protects nothing.
    pub fn pick<T>(self, protected: T, direct: T, indirect: T) -> Option<T> {
        match self {
            Protect::Nothing => None,
            Protect::All => Some(protected),
            Protect::Direct => Some(direct),
            Protect::Indirect => Some(indirect),
        }
    }
}

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64, seeded from `(seed, epoch, seq_id)`.
pub struct Rng(u64);

impl Rng {
    /// The generator of one sequence in one epoch.
    pub fn for_sequence(seed: u64, epoch: u64, seq_id: u64) -> Self {
        let s = mix64(seed.wrapping_add(GOLDEN));
        let s = mix64(s ^ epoch.wrapping_add(GOLDEN));
        Rng(mix64(s ^ seq_id.wrapping_add(GOLDEN)))
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        mix64(self.0)
    }

    /// Uniform in `0..n` (n > 0), without bias (Lemire).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        let mut m = (self.next_u64() as u128) * (n as u128);
        if (m as u64) < n {
            let threshold = n.wrapping_neg() % n;
            while (m as u64) < threshold {
                m = (self.next_u64() as u128) * (n as u128);
            }
        }
        (m >> 64) as u64
    }

    /// Uniform in [0, 1) with 53 bits.
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// `round(p × n)` with halves rounded up, as the budget of a sequence.
pub fn budget(probability: f64, eligible: usize) -> usize {
    ((probability * eligible as f64) + 0.5).floor() as usize
}

/// Reusable scratch space of [`Sampler::fill`].
#[derive(Default)]
pub struct Sampler {
    blocked: Vec<bool>,
    /// First token and one past the last token of each word.
    spans: Vec<(u32, u32)>,
    eligible: Vec<u32>,
}

/// One output row: `input_ids`, `attention_mask` and `labels`, each of the batch's length.
pub struct Row<'a> {
    pub input_ids: &'a mut [i64],
    pub attention_mask: &'a mut [i64],
    pub labels: &'a mut [i64],
}

impl Sampler {
    /// Write the training row of `seq` into `row`, padded with `cfg.pad_id`. `row_index` only
    /// locates errors.
    pub fn fill<F: Fn(usize) -> bool>(
        &mut self,
        seq: &Sequence<'_, F>,
        cfg: &MaskConfig,
        row: Row<'_>,
        row_index: usize,
    ) -> Result<()> {
        let n = seq.input_ids.len();
        let length = row.input_ids.len();
        if n > length {
            return Err(CoreError::InvalidArgument(format!(
                "sequence at row {row_index} has {n} tokens, more than the batch length {length}"
            )));
        }
        if seq.word_ids.len() != n {
            return Err(CoreError::InvalidArgument(format!(
                "sequence at row {row_index}: word_ids has {} entries for {n} input_ids",
                seq.word_ids.len()
            )));
        }
        for (out, &id) in row.input_ids.iter_mut().zip(seq.input_ids) {
            *out = id as i64;
        }
        row.input_ids[n..].fill(cfg.pad_id as i64);
        row.attention_mask[..n].fill(1);
        row.attention_mask[n..].fill(0);
        row.labels.fill(IGNORE);

        if cfg.causal {
            for (i, (label, &id)) in row.labels.iter_mut().zip(seq.input_ids).enumerate() {
                if !(seq.protected)(i) {
                    *label = id as i64;
                }
            }
            return Ok(());
        }

        // Words: their token ranges, and blocked when any of their tokens is protected. One
        // pass without data-dependent branches (whether a token starts a word is as good as
        // random); slot `n` takes the tokens outside words, and the numbering is checked at
        // the end.
        let (spans, blocked) = (&mut self.spans, &mut self.blocked);
        spans.clear();
        spans.resize(n + 1, (0, 0));
        blocked.clear();
        blocked.resize(n + 1, false);
        let (mut words, mut valid, mut prev) = (0usize, true, -1i32);
        for (i, &w) in seq.word_ids.iter().enumerate() {
            // As an unsigned number, -1 (and any negative) is past every word and every slot.
            let u = w as u32 as usize;
            let new = u == words;
            let more = prev == w && u + 1 == words;
            valid &= new | more | (w == -1);
            let slot = u.min(n);
            let span = &mut spans[slot];
            // Branch-free selects: the start moves on a new word, the end on every token.
            let keep = u32::from(new).wrapping_sub(1);
            span.0 = (span.0 & keep) | (i as u32 & !keep);
            span.1 = i as u32 + 1;
            blocked[slot] = (blocked[slot] & !new) | (seq.protected)(i);
            words += usize::from(new);
            prev = w;
        }
        if !valid {
            return Err(bad_word_ids(seq.word_ids, row_index));
        }
        spans.truncate(words);
        blocked.truncate(words);
        let blocked = &self.blocked;
        self.eligible.clear();
        self.eligible
            .extend((0..blocked.len() as u32).filter(|&w| !blocked[w as usize]));
        let total = self.eligible.len();
        let m = budget(cfg.probability, total);
        let mut rng = Rng::for_sequence(cfg.seed, cfg.epoch, seq.seq_id);
        // Partial Fisher-Yates: the first m entries become a uniform m-subset.
        for i in 0..m {
            let j = i + rng.below((total - i) as u64) as usize;
            self.eligible.swap(i, j);
        }
        // The chosen words' tokens in token order (words are numbered in token order).
        let chosen = &mut self.eligible[..m];
        chosen.sort_unstable();
        for &w in chosen.iter() {
            let (start, end) = self.spans[w as usize];
            for i in start as usize..end as usize {
                row.labels[i] = seq.input_ids[i] as i64;
                let u = rng.unit();
                if u < cfg.replace_mask {
                    row.input_ids[i] = cfg.mask_id as i64;
                } else if u < cfg.replace_mask + cfg.replace_random {
                    row.input_ids[i] = rng.below(cfg.vocab_size as u64) as i64;
                }
            }
        }
        Ok(())
    }
}

/// The error for word numbers that do not count words 0, 1, 2, ... in order, each word's
/// tokens consecutive: where the first bad one is.
#[cold]
fn bad_word_ids(word_ids: &[i32], row_index: usize) -> CoreError {
    let mut words = 0usize;
    for (i, &w) in word_ids.iter().enumerate() {
        if w == -1 {
            continue;
        }
        if w >= 0 && w as usize == words {
            words += 1;
        } else if !(w >= 0 && i > 0 && word_ids[i - 1] == w && w as usize + 1 == words) {
            return CoreError::InvalidArgument(format!(
                "sequence at row {row_index}: word_ids must number words 0, 1, 2, ... in \
                 order, each word's tokens consecutive (found {w} at token {i})"
            ));
        }
    }
    // Not reached from `fill` (it calls this only for invalid numbering).
    CoreError::InvalidArgument(format!("sequence at row {row_index}: invalid word_ids"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(causal: bool, protect: Protect) -> MaskConfig {
        MaskConfig {
            causal,
            protect,
            probability: 0.5,
            replace_mask: 1.0,
            replace_random: 0.0,
            mask_id: 99,
            pad_id: 0,
            vocab_size: 100,
            seed: 7,
            epoch: 0,
        }
    }

    fn run(c: &MaskConfig, ids: &[u32], words: &[i32], prot: &[bool], len: usize) -> [Vec<i64>; 3] {
        let seq = Sequence {
            seq_id: 3,
            input_ids: ids,
            word_ids: words,
            protected: |i: usize| c.protect.pick(prot, prot, prot).is_some_and(|p| p[i]),
        };
        let (mut a, mut b, mut l) = (vec![0; len], vec![0; len], vec![0; len]);
        Sampler::default()
            .fill(
                &seq,
                c,
                Row {
                    input_ids: &mut a,
                    attention_mask: &mut b,
                    labels: &mut l,
                },
                0,
            )
            .unwrap();
        [a, b, l]
    }

    #[test]
    fn splitmix_matches_the_published_sequence() {
        // SplitMix64 seeded with 1234567: first outputs of the reference implementation.
        let mut r = Rng(1234567);
        assert_eq!(r.next_u64(), 6457827717110365317);
        assert_eq!(r.next_u64(), 3203168211198807973);
    }

    #[test]
    fn masked_whole_words_exact_budget_never_protected() {
        let ids = [1, 10, 11, 12, 13, 14, 15, 2];
        let words = [-1, 0, 0, 1, 2, 2, 3, -1];
        let prot = [false, false, false, true, false, false, false, false];
        let [inp, att, lab] = run(&cfg(false, Protect::All), &ids, &words, &prot, 10);
        assert_eq!(att, [1, 1, 1, 1, 1, 1, 1, 1, 0, 0]);
        // 3 eligible words (0, 2, 3) -> round(1.5) = 2 masked, whole words.
        let masked: Vec<usize> = (0..8).filter(|&i| lab[i] != IGNORE).collect();
        let mut chosen: Vec<i32> = masked.iter().map(|&i| words[i]).collect();
        chosen.dedup();
        assert_eq!(chosen.len(), 2);
        for &i in &masked {
            assert_eq!(lab[i], ids[i] as i64);
            assert_eq!(inp[i], 99);
            assert_ne!(words[i], 1);
        }
        for w in chosen {
            for (i, _) in words.iter().enumerate().filter(|(_, &x)| x == w) {
                assert!(masked.contains(&i));
            }
        }
        assert_eq!(&inp[8..], &[0, 0]);
    }

    #[test]
    fn causal_labels_skip_protected_and_padding() {
        let ids = [1, 10, 11, 12];
        let words = [-1, 0, 1, 1];
        let prot = [false, false, true, true];
        let [inp, att, lab] = run(&cfg(true, Protect::All), &ids, &words, &prot, 6);
        assert_eq!(inp, [1, 10, 11, 12, 0, 0]);
        assert_eq!(att, [1, 1, 1, 1, 0, 0]);
        assert_eq!(lab, [1, 10, IGNORE, IGNORE, IGNORE, IGNORE]);
        let [_, _, lab] = run(&cfg(true, Protect::Nothing), &ids, &words, &prot, 6);
        assert_eq!(lab, [1, 10, 11, 12, IGNORE, IGNORE]);
    }

    #[test]
    fn bad_word_numbering_is_an_error() {
        let c = cfg(false, Protect::All);
        for (words, found) in [
            ([0, 2, 2], "found 2 at token 1"),
            ([0, 1, 0], "found 0 at token 2"),
            ([-2, 0, 1], "found -2 at token 0"),
            ([0, -1, 0], "found 0 at token 2"),
        ] {
            let seq = Sequence {
                seq_id: 0,
                input_ids: &[1, 2, 3],
                word_ids: &words,
                protected: |_| false,
            };
            let (mut a, mut b, mut l) = (vec![0; 3], vec![0; 3], vec![0; 3]);
            let row = Row {
                input_ids: &mut a,
                attention_mask: &mut b,
                labels: &mut l,
            };
            let err = Sampler::default().fill(&seq, &c, row, 5).unwrap_err();
            assert!(err.to_string().contains(found), "{words:?}: {err}");
            assert!(err.to_string().contains("row 5"), "{words:?}: {err}");
        }
    }

    #[test]
    fn too_long_is_an_error() {
        let c = cfg(true, Protect::All);
        let seq = Sequence {
            seq_id: 0,
            input_ids: &[1, 2, 3],
            word_ids: &[0, 1, 2],
            protected: |_| false,
        };
        let (mut a, mut b, mut l) = (vec![0; 2], vec![0; 2], vec![0; 2]);
        let row = Row {
            input_ids: &mut a,
            attention_mask: &mut b,
            labels: &mut l,
        };
        let err = Sampler::default().fill(&seq, &c, row, 4).unwrap_err();
        assert!(err.to_string().contains("row 4"));
    }
}

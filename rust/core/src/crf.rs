//! Inference of a linear-chain CRF (the `crf` recognizer): the best labelling of each sequence
//! (Viterbi) and every position's label marginals (forward-backward), from binary attribute
//! strings per position.
//!
//! The model is CRFsuite's first-order CRF (`crf1d`): a sequence `y` of `x` scores
//! `sum_t state(x_t, y_t) + sum_{t>0} trans(y_{t-1}, y_t)`, where `state(x_t, l)` sums the
//! weights of position `t`'s attributes for label `l`; no start or end transitions. Attributes
//! the model does not know weigh nothing.

use crate::error::{CoreError, Result};
use crate::text::StrCol;
use rayon::prelude::*;
use rustc_hash::FxHashMap;

/// A trained linear-chain CRF.
pub struct Crf {
    labels: Vec<String>,
    index: FxHashMap<String, u32>,
    /// `weights[a * L + l]`: attribute `a`'s weight for label `l`; then a row of zeros, the
    /// weights of no attribute ([`Crf::no_attribute`]).
    weights: Vec<f64>,
    /// `trans[i * L + j]`: the weight of label `j` following label `i`.
    trans: Vec<f64>,
    /// `exp(trans)`, for forward-backward in scaled probabilities.
    exp_trans: Vec<f64>,
}

/// What [`Crf::tag`] finds: per position, the label of the best labelling and the marginal
/// probability of every label (`marginals[t * L + l]`).
pub struct Tagged {
    pub labels: Vec<u32>,
    pub marginals: Vec<f64>,
}

/// What `Crf::tag_words` (in the `crf_words` module) finds: per position, the label of the best
/// labelling (when asked for), the probability of a label other than the background one (the
/// sum of their marginals) and the most likely of those labels.
pub struct Summary {
    pub labels: Vec<u32>,
    pub p: Vec<f64>,
    pub best: Vec<u32>,
}

/// How far (relative) the scaled forward-backward's probabilities are taken to be from the
/// log-space ones: about 1e-12 apart in practice (the log-space sums lose digits to the size of
/// the log-partition), so 1e-10 leaves a wide margin.
const DOUBT: f64 = 1e-10;

/// What must come out of `Crf::tag_words` (in the `crf_words` module) as forward-backward in log
/// space gives it (the results of phisieve before the scaled forward-backward, byte for
/// byte): the decisions on the probability `p` of the labels other than the background one,
/// and the `f32` scores of the positions that become spans. The scaled pass differs from the
/// log-space one by far less than [`DOUBT`]; where `p` is within `DOUBT` of a threshold, of
/// where its `f32` rounding changes, or of a tie between the most likely labels, in a
/// position that counts, the sequence is done again in log space (a few in a hundred).
pub struct Exact {
    /// The positions whose `p` becomes a score (a span's): those the best labelling gives a
    /// label other than the background, and those of `p` at least this.
    pub scored_from: f64,
    /// The probabilities `p` is compared with.
    pub thresholds: Vec<f64>,
}

impl Exact {
    /// Whether `p`, known to within [`DOUBT`], might fall on the other side of a threshold,
    /// or (when the position is `scored`) round to another `f32`, or (`tie`) name another
    /// most likely label.
    fn doubtful(&self, p: f64, tie: bool, scored: bool) -> bool {
        let (lo, hi) = (p * (1.0 - DOUBT), p * (1.0 + DOUBT));
        tie || self.thresholds.iter().any(|&x| (lo >= x) != (hi >= x))
            || (scored && lo as f32 != hi as f32)
    }
}

fn log_sum_exp(values: impl Iterator<Item = f64> + Clone) -> f64 {
    let top = values.clone().fold(f64::NEG_INFINITY, f64::max);
    if top == f64::NEG_INFINITY {
        return top;
    }
    top + values.map(|v| (v - top).exp()).sum::<f64>().ln()
}

impl Crf {
    /// A CRF over `labels`, with `weights` (`attributes.len() × labels.len()`, row-major) and
    /// `trans` (`labels.len()²`, from-row, to-column).
    pub fn new(
        labels: Vec<String>,
        attributes: Vec<String>,
        weights: Vec<f64>,
        trans: Vec<f64>,
    ) -> Result<Self> {
        let l = labels.len();
        if l == 0 {
            return Err(CoreError::InvalidArgument("a CRF needs labels".into()));
        }
        if weights.len() != attributes.len() * l || trans.len() != l * l {
            return Err(CoreError::InvalidArgument(format!(
                "a CRF of {l} labels and {} attributes needs {} weights and {} transitions, \
                 not {} and {}",
                attributes.len(),
                attributes.len() * l,
                l * l,
                weights.len(),
                trans.len()
            )));
        }
        if weights.iter().chain(&trans).any(|w| !w.is_finite()) {
            return Err(CoreError::InvalidArgument(
                "a CRF's weights must be finite".into(),
            ));
        }
        let mut index = FxHashMap::default();
        for (a, name) in attributes.into_iter().enumerate() {
            if index.insert(name, a as u32).is_some() {
                return Err(CoreError::InvalidArgument(
                    "a CRF's attributes must be distinct".into(),
                ));
            }
        }
        let exp_trans = trans.iter().map(|w| w.exp()).collect();
        let mut weights = weights;
        weights.resize(weights.len() + l, 0.0);
        Ok(Self {
            labels,
            index,
            weights,
            trans,
            exp_trans,
        })
    }

    /// The labels, in the order of label numbers and marginals.
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// Tag sequences: position `t`'s attributes are the values of `columns` at row `t` (a
    /// null is no attribute); `per_sequence[s]` is how many positions sequence `s` has.
    /// Sequences are tagged in parallel; the result does not depend on the threads.
    pub fn tag(&self, columns: &[StrCol<'_>], per_sequence: &[i64]) -> Result<Tagged> {
        let bad = |m: &str| CoreError::InvalidArgument(m.to_string());
        let seq_start = sequence_starts(per_sequence)?;
        let positions: i64 = per_sequence.iter().sum();
        let rows = columns.first().map_or(0, |c| c.len());
        if columns.iter().any(|c| c.len() != rows) {
            return Err(bad("the attribute columns differ in length"));
        }
        if positions as usize != rows {
            return Err(bad(
                "the sequences' positions do not add up to the positions given",
            ));
        }
        Ok(self.tag_by(&seq_start, |a, state| {
            let l = self.labels.len();
            for (t, row) in state.chunks_exact_mut(l).enumerate() {
                for column in columns {
                    if let Some(k) = column.get(a + t).and_then(|name| self.attribute(name)) {
                        self.add_weights(row, k);
                    }
                }
            }
        }))
    }

    /// The attribute number of `name`, if the model knows it.
    #[inline]
    pub(crate) fn attribute(&self, name: &str) -> Option<u32> {
        self.index.get(name).copied()
    }

    /// The attribute number whose weights are all zero: adding it adds nothing (a score
    /// starts at +0.0 and never becomes -0.0, so `x + 0.0` is `x`), and saves a branch.
    pub(crate) fn no_attribute(&self) -> u32 {
        (self.weights.len() / self.labels.len() - 1) as u32
    }

    /// Add attribute `k`'s weights to a position's scores (`row`: one per label).
    #[inline]
    pub(crate) fn add_weights(&self, row: &mut [f64], k: u32) {
        let l = self.labels.len();
        let w = &self.weights[k as usize * l..(k as usize + 1) * l];
        for (x, y) in row.iter_mut().zip(w) {
            *x += y;
        }
    }

    /// Tag the sequences that start at `seq_start` (each sequence `s` is positions
    /// `seq_start[s]..seq_start[s + 1]`), in parallel: `state(a, scores)` fills the scores
    /// (positions × labels, zeroed) of the sequence starting at position `a`.
    pub(crate) fn tag_by<F>(&self, seq_start: &[usize], state: F) -> Tagged
    where
        F: Fn(usize, &mut [f64]) + Sync,
    {
        let parts = self.each_sequence(seq_start, state, |scores| {
            (self.viterbi(scores), self.marginals(scores))
        });
        let rows = seq_start.last().copied().unwrap_or(0);
        let mut out = Tagged {
            labels: Vec::with_capacity(rows),
            marginals: Vec::with_capacity(rows * self.labels.len()),
        };
        for (labels, marginals) in parts {
            out.labels.extend(labels);
            out.marginals.extend(marginals);
        }
        out
    }

    /// Like [`Crf::tag_by`], but what each position's marginals say about the labels other
    /// than `background` (a label number; `None`: every label counts): their probability
    /// (the sum of their marginals, in label order) and the most likely of them (ties: the
    /// lower number; `background` when there is none). The best labelling only when `path`.
    /// With `exact`, a sequence whose results the scaled forward-backward might not give as
    /// the log-space one would is done again in log space ([`Exact`]).
    pub(crate) fn summary_by<F>(
        &self,
        seq_start: &[usize],
        background: Option<usize>,
        path: bool,
        exact: Option<&Exact>,
        state: F,
    ) -> Summary
    where
        F: Fn(usize, &mut [f64]) + Sync,
    {
        let l = self.labels.len();
        // Per position: the probability of the other labels and the most likely of them
        // (into `p` and `best`), and whether the second most likely is within `DOUBT` of it.
        let summarize = |marginals: &[f64], p: &mut [f64], best: &mut [u32], tie: &mut [bool]| {
            for (t, row) in marginals.chunks_exact(l).enumerate() {
                let mut sum = 0.0;
                let (mut top, mut second): (Option<(usize, f64)>, f64) = (None, 0.0);
                for (j, &m) in row.iter().enumerate() {
                    if Some(j) == background {
                        continue;
                    }
                    sum += m;
                    match top {
                        Some((_, t)) if m <= t => second = second.max(m),
                        _ => {
                            second = top.map_or(0.0, |(_, t)| t);
                            top = Some((j, m));
                        }
                    }
                }
                p[t] = sum;
                best[t] = top.map_or(background.unwrap_or(0), |(j, _)| j) as u32;
                tie[t] = top.is_some_and(|(_, t)| second >= t * (1.0 - 2.0 * DOUBT));
            }
        };
        // The results, written in place: each sequence's own slices of them.
        let rows = seq_start.last().copied().unwrap_or(0);
        let mut out = Summary {
            labels: vec![0; if path { rows } else { 0 }],
            p: vec![0.0; rows],
            best: vec![0; rows],
        };
        let mut parts = Vec::with_capacity(seq_start.len().saturating_sub(1));
        let (mut labels, mut p, mut best) =
            (&mut out.labels[..], &mut out.p[..], &mut out.best[..]);
        for w in seq_start.windows(2) {
            let n = w[1] - w[0];
            let (these, rest) = std::mem::take(&mut labels).split_at_mut(if path { n } else { 0 });
            labels = rest;
            let (p_here, rest) = std::mem::take(&mut p).split_at_mut(n);
            p = rest;
            let (best_here, rest) = std::mem::take(&mut best).split_at_mut(n);
            best = rest;
            parts.push((w[0], these, p_here, best_here));
        }
        parts.into_par_iter().for_each(|(a, labels, p, best)| {
            let n = p.len();
            let mut scores = vec![0.0; n * l];
            state(a, &mut scores);
            if path {
                labels.copy_from_slice(&self.viterbi(&scores));
            }
            let mut tie = vec![false; n];
            summarize(&self.marginals(&scores), p, best, &mut tie);
            if let Some(exact) = exact {
                let doubtful = (0..n).any(|t| {
                    let scored = (path && Some(labels[t] as usize) != background)
                        || p[t] >= exact.scored_from;
                    exact.doubtful(p[t], scored && tie[t], scored)
                });
                if doubtful {
                    summarize(&self.log_marginals(&scores), p, best, &mut tie);
                }
            }
        });
        out
    }

    /// `finish` of each sequence's scores (filled by `state`, as in [`Crf::tag_by`]), in
    /// parallel, in order.
    fn each_sequence<T, F, G>(&self, seq_start: &[usize], state: F, finish: G) -> Vec<T>
    where
        T: Send,
        F: Fn(usize, &mut [f64]) + Sync,
        G: Fn(&[f64]) -> T + Sync,
    {
        let l = self.labels.len();
        let sequences = seq_start.len().saturating_sub(1);
        (0..sequences)
            .into_par_iter()
            .map(|s| {
                let (a, b) = (seq_start[s], seq_start[s + 1]);
                let mut scores = vec![0.0; (b - a) * l];
                state(a, &mut scores);
                finish(&scores)
            })
            .collect()
    }

    /// The best labelling of one sequence (`state`: positions × labels); ties go to the
    /// lower label number.
    fn viterbi(&self, state: &[f64]) -> Vec<u32> {
        let l = self.labels.len();
        let n = state.len() / l;
        if n == 0 {
            return Vec::new();
        }
        let mut score = state[..l].to_vec();
        let mut back = vec![0u32; n * l];
        let mut next = vec![0.0; l];
        for t in 1..n {
            for j in 0..l {
                let (mut best, mut arg) = (f64::NEG_INFINITY, 0);
                for (i, s) in score.iter().enumerate() {
                    let v = s + self.trans[i * l + j];
                    if v > best {
                        (best, arg) = (v, i);
                    }
                }
                next[j] = best + state[t * l + j];
                back[t * l + j] = arg as u32;
            }
            std::mem::swap(&mut score, &mut next);
        }
        let mut last = 0;
        for j in 1..l {
            if score[j] > score[last] {
                last = j;
            }
        }
        let mut path = vec![0u32; n];
        path[n - 1] = last as u32;
        for t in (1..n).rev() {
            path[t - 1] = back[t * l + path[t] as usize];
        }
        path
    }

    /// Every position's label marginals (positions × labels): forward-backward over scaled
    /// probabilities, as CRFsuite computes them (a few exponentials per position, not one per
    /// pair of labels), or in log space ([`Crf::log_marginals`]) where scaling would
    /// underflow or overflow.
    fn marginals(&self, state: &[f64]) -> Vec<f64> {
        let l = self.labels.len();
        let n = state.len() / l;
        if n == 0 {
            return Vec::new();
        }
        let et = &self.exp_trans;
        // Each position's scores as probabilities, less their maximum (a factor per position,
        // which the normalisation takes out).
        let mut ex = vec![0.0; n * l];
        for (out, row) in ex.chunks_exact_mut(l).zip(state.chunks_exact(l)) {
            let top = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            for (x, s) in out.iter_mut().zip(row) {
                *x = (s - top).exp();
            }
        }
        // Forward: alpha[t] normalised to sum 1; scale[t] is 1 / its sum before.
        let mut alpha = vec![0.0; n * l];
        let mut scale = vec![0.0; n];
        for t in 0..n {
            let (done, rest) = alpha.split_at_mut(t * l);
            let cur = &mut rest[..l];
            if t == 0 {
                cur.copy_from_slice(&ex[..l]);
            } else {
                let prev = &done[(t - 1) * l..];
                for (j, c) in cur.iter_mut().enumerate() {
                    let mut acc = 0.0;
                    for (i, a) in prev.iter().enumerate() {
                        acc += a * et[i * l + j];
                    }
                    *c = acc * ex[t * l + j];
                }
            }
            let sum: f64 = cur.iter().sum();
            if !(sum > 0.0 && sum.is_finite()) {
                return self.log_marginals(state);
            }
            scale[t] = 1.0 / sum;
            for c in cur.iter_mut() {
                *c *= scale[t];
            }
        }
        // Backward, with the same scales.
        let mut beta = vec![0.0; n * l];
        beta[(n - 1) * l..].fill(scale[n - 1]);
        let mut next = vec![0.0; l];
        for t in (0..n - 1).rev() {
            for (j, x) in next.iter_mut().enumerate() {
                *x = ex[(t + 1) * l + j] * beta[(t + 1) * l + j];
            }
            for i in 0..l {
                let row = &et[i * l..(i + 1) * l];
                let acc: f64 = row.iter().zip(&next).map(|(e, x)| e * x).sum();
                beta[t * l + i] = acc * scale[t];
            }
        }
        let out: Vec<f64> = (0..n * l)
            .map(|k| alpha[k] * beta[k] / scale[k / l])
            .collect();
        if out.iter().all(|p| p.is_finite()) {
            out
        } else {
            self.log_marginals(state)
        }
    }

    /// Every position's label marginals (positions × labels), in log space.
    fn log_marginals(&self, state: &[f64]) -> Vec<f64> {
        let l = self.labels.len();
        let n = state.len() / l;
        if n == 0 {
            return Vec::new();
        }
        let trans = &self.trans;
        let mut alpha = vec![0.0; n * l];
        alpha[..l].copy_from_slice(&state[..l]);
        for t in 1..n {
            for j in 0..l {
                let prev = &alpha[(t - 1) * l..t * l];
                let v = log_sum_exp(prev.iter().enumerate().map(|(i, a)| a + trans[i * l + j]));
                alpha[t * l + j] = v + state[t * l + j];
            }
        }
        let mut beta = vec![0.0; n * l];
        for t in (0..n - 1).rev() {
            for i in 0..l {
                let v =
                    log_sum_exp((0..l).map(|j| {
                        trans[i * l + j] + state[(t + 1) * l + j] + beta[(t + 1) * l + j]
                    }));
                beta[t * l + i] = v;
            }
        }
        let z = log_sum_exp(alpha[(n - 1) * l..].iter().copied());
        alpha
            .iter()
            .zip(&beta)
            .map(|(a, b)| (a + b - z).exp())
            .collect()
    }
}

/// Where each sequence starts, from the number of positions of each (refused when one is
/// negative); the last entry is the total.
pub(crate) fn sequence_starts(per_sequence: &[i64]) -> Result<Vec<usize>> {
    if per_sequence.iter().any(|&n| n < 0) {
        return Err(CoreError::InvalidArgument(
            "position counts must not be negative".to_string(),
        ));
    }
    let mut seq_start = Vec::with_capacity(per_sequence.len() + 1);
    let mut at = 0usize;
    seq_start.push(0);
    for &n in per_sequence {
        at += n as usize;
        seq_start.push(at);
    }
    Ok(seq_start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{ArrayRef, StringArray};
    use std::sync::Arc;

    /// Every labelling of a short sequence, scored by brute force.
    fn brute(crf: &Crf, state: &[f64]) -> (Vec<u32>, Vec<f64>) {
        let l = crf.labels.len();
        let n = state.len() / l;
        let mut best = (f64::NEG_INFINITY, vec![]);
        let mut marg = vec![0.0; n * l];
        let mut z = 0.0;
        for code in 0..l.pow(n as u32) {
            let y: Vec<usize> = (0..n).map(|t| code / l.pow(t as u32) % l).collect();
            let mut s = 0.0;
            for t in 0..n {
                s += state[t * l + y[t]];
                if t > 0 {
                    s += crf.trans[y[t - 1] * l + y[t]];
                }
            }
            if s > best.0 {
                best = (s, y.iter().map(|&v| v as u32).collect());
            }
            z += s.exp();
            for t in 0..n {
                marg[t * l + y[t]] += s.exp();
            }
        }
        (best.1, marg.iter().map(|m| m / z).collect())
    }

    #[test]
    fn viterbi_and_marginals_match_brute_force() {
        let labels = vec!["O".into(), "NAME".into(), "DATE".into()];
        let attrs = vec!["a".into(), "b".into(), "c".into()];
        let weights = vec![0.5, -1.0, 0.2, -0.3, 1.5, 0.1, 0.0, 0.4, -2.0];
        let trans = vec![1.0, -0.5, 0.3, 0.2, 0.8, -1.0, -0.4, 0.1, 0.6];
        let crf = Crf::new(labels, attrs, weights, trans).unwrap();
        // Two attribute columns; four positions (a null is no attribute, the unknown "zz"
        // weighs nothing), in sequences of 3 and 1.
        let first: ArrayRef = Arc::new(StringArray::from(vec![
            Some("a"),
            Some("b"),
            Some("c"),
            None,
        ]));
        let second: ArrayRef = Arc::new(StringArray::from(vec![
            Some("zz"),
            Some("a"),
            Some("b"),
            Some("c"),
        ]));
        let columns = [
            StrCol::new(&first, "attrs").unwrap(),
            StrCol::new(&second, "attrs").unwrap(),
        ];
        let tagged = crf.tag(&columns, &[3, 1]).unwrap();
        let l = 3;
        let mut state = vec![0.0; 4 * l];
        for (t, row) in state.chunks_exact_mut(l).enumerate() {
            for column in &columns {
                if let Some(&k) = column.get(t).and_then(|name| crf.index.get(name)) {
                    let w = &crf.weights[k as usize * l..(k as usize + 1) * l];
                    for (x, y) in row.iter_mut().zip(w) {
                        *x += y;
                    }
                }
            }
        }
        let (p1, m1) = brute(&crf, &state[..3 * l]);
        let (p2, m2) = brute(&crf, &state[3 * l..]);
        assert_eq!(tagged.labels, [p1, p2].concat());
        for (a, b) in tagged.marginals.iter().zip(m1.iter().chain(&m2)) {
            assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        }
    }

    #[test]
    fn scaled_marginals_match_log_space_and_fall_back_when_they_cannot_scale() {
        let labels = vec!["O".into(), "NAME".into(), "DATE".into()];
        let attrs = vec!["a".into()];
        let weights = vec![0.0, 0.0, 0.0];
        // Ordinary transitions, then some so negative that exp() underflows to 0.
        for trans in [
            vec![1.0, -0.5, 0.3, 0.2, 0.8, -1.0, -0.4, 0.1, 0.6],
            vec![
                0.0, -800.0, -800.0, -800.0, 0.0, -800.0, -800.0, -800.0, 0.0,
            ],
        ] {
            let crf = Crf::new(labels.clone(), attrs.clone(), weights.clone(), trans).unwrap();
            let mut seed = 7u64;
            let mut next = || {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((seed >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 40.0
            };
            for n in [1, 2, 5, 40] {
                let state: Vec<f64> = (0..n * 3).map(|_| next()).collect();
                let (scaled, log) = (crf.marginals(&state), crf.log_marginals(&state));
                assert_eq!(scaled.len(), log.len());
                for (a, b) in scaled.iter().zip(&log) {
                    assert!((a - b).abs() < 1e-12, "{a} vs {b}");
                }
            }
        }
        // Each position's scores leave one label in e^-1000 of the others, and the one
        // transition between the two best is e^-800: the scaled forward pass sums to 0.
        let trans = vec![0.0, -800.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let crf = Crf::new(labels, attrs, weights, trans).unwrap();
        let state = [0.0, -1000.0, -1000.0, -1000.0, 0.0, -1000.0];
        let marginals = crf.marginals(&state);
        assert_eq!(marginals, crf.log_marginals(&state));
        for row in marginals.chunks(3) {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        }
    }

    #[test]
    fn exact_sequences_near_a_threshold_are_done_in_log_space() {
        let labels = vec!["O".into(), "NAME".into(), "DATE".into()];
        let trans = vec![1.0, -0.5, 0.3, 0.2, 0.8, -1.0, -0.4, 0.1, 0.6];
        let crf = Crf::new(labels, vec!["a".into()], vec![0.0; 3], trans).unwrap();
        let mut seed = 3u64;
        let state: Vec<f64> = (0..60 * 3)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((seed >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 300.0
            })
            .collect();
        let starts = [0, 20, 60];
        let fill =
            |a: usize, out: &mut [f64]| out.copy_from_slice(&state[a * 3..a * 3 + out.len()]);
        let run = |exact: Option<&Exact>| crf.summary_by(&starts, Some(0), true, exact, fill);
        let scaled = run(None);
        // In log space, by hand.
        let mut log_p = Vec::new();
        for s in 0..2 {
            let m = crf.log_marginals(&state[starts[s] * 3..starts[s + 1] * 3]);
            log_p.extend(m.chunks(3).map(|r| 0.0 + r[1] + r[2]));
        }
        let quiet = Exact {
            scored_from: f64::INFINITY,
            thresholds: vec![],
        };
        // Nothing doubtful: the scaled pass stands (it differs from log space a little).
        let none = run(Some(&quiet));
        assert_eq!(none.p, scaled.p);
        for (a, b) in scaled.p.iter().zip(&log_p) {
            assert!(
                (a - b).abs() <= 1e-12 * b.max(1e-300) + 1e-300,
                "{a} vs {b}"
            );
        }
        // A threshold at one word's probability in the second sequence: that sequence is
        // done again in log space, the first is not.
        let near = Exact {
            scored_from: f64::INFINITY,
            thresholds: vec![scaled.p[30]],
        };
        let redone = run(Some(&near));
        assert_eq!(redone.p[..20], scaled.p[..20]);
        assert_eq!(redone.p[20..], log_p[20..]);
        assert_eq!(redone.labels, scaled.labels);
    }

    #[test]
    fn bad_shapes_are_errors() {
        let one = || vec!["O".to_string()];
        assert!(Crf::new(one(), vec!["a".into()], vec![], vec![0.0]).is_err());
        assert!(Crf::new(
            one(),
            vec!["a".into(), "a".into()],
            vec![1.0, 1.0],
            vec![0.0]
        )
        .is_err());
        assert!(Crf::new(one(), vec!["a".into()], vec![f64::NAN], vec![0.0]).is_err());
        let crf = Crf::new(one(), vec!["a".into()], vec![1.0], vec![0.0]).unwrap();
        let col: ArrayRef = Arc::new(StringArray::from(vec!["a"]));
        let short: ArrayRef = Arc::new(StringArray::from(Vec::<&str>::new()));
        let attrs = StrCol::new(&col, "attrs").unwrap();
        assert!(crf.tag(&[attrs], &[2]).is_err());
        assert!(crf.tag(&[attrs], &[-1, 2]).is_err());
        assert!(crf
            .tag(&[attrs, StrCol::new(&short, "attrs").unwrap()], &[1])
            .is_err());
        let empty = crf.tag(&[attrs], &[0, 1, 0]).unwrap();
        assert_eq!(empty.labels, vec![0]);
        assert_eq!(empty.marginals, vec![1.0]);
    }
}

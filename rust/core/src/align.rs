//! Model tokens aligned with phisieve's words (`phisieve encode`).
//!
//! Each model token (a character range of its text) belongs to the first word it overlaps,
//! and carries every flag of every word it overlaps: a token that straddles two words is
//! protected when either is. Offsets are code points within each text; tokens and words come
//! text after text, each text's in order of their start.

use crate::error::{CoreError, Result};

/// The alignment of a batch of texts: per token, the text-local number of the first word it
/// overlaps (-1 for none: whitespace, punctuation, an empty token), and per flag whether any
/// overlapped word has it.
pub struct Aligned {
    pub words: Vec<i64>,
    pub flags: Vec<Vec<bool>>,
}

/// Align the tokens of several texts with their words.
///
/// `tok_counts[t]` tokens of text `t` have ranges `tok_starts[i]..tok_ends[i]`; its
/// `word_counts[t]` words have `word_starts[j]..word_ends[j]` (sorted, not overlapping);
/// `flags[f][j]` is flag `f` of word `j`.
#[allow(clippy::too_many_arguments)]
pub fn align(
    tok_starts: &[i64],
    tok_ends: &[i64],
    tok_counts: &[i64],
    word_starts: &[i64],
    word_ends: &[i64],
    word_counts: &[i64],
    flags: &[&[bool]],
) -> Result<Aligned> {
    let bad = |m: &str| Err(CoreError::InvalidArgument(m.to_string()));
    let tokens = tok_starts.len();
    let words = word_starts.len();
    if tok_ends.len() != tokens || word_ends.len() != words {
        return bad("starts and ends must have the same length");
    }
    if tok_counts.len() != word_counts.len() {
        return bad("token and word counts must cover the same texts");
    }
    if flags.iter().any(|f| f.len() != words) {
        return bad("every flag needs one entry per word");
    }
    let sum = |c: &[i64]| {
        c.iter()
            .try_fold(0usize, |a, &n| usize::try_from(n).ok().map(|n| a + n))
    };
    if sum(tok_counts) != Some(tokens) || sum(word_counts) != Some(words) {
        return bad("the counts must add up to the tokens and words given");
    }
    // Prefix counts of each flag over the words: any flag in words a..=b in O(1).
    let prefix: Vec<Vec<u32>> = flags
        .iter()
        .map(|f| {
            let mut p = Vec::with_capacity(words + 1);
            p.push(0u32);
            for &x in f.iter() {
                p.push(p[p.len() - 1] + u32::from(x));
            }
            p
        })
        .collect();
    let mut out_words = vec![-1i64; tokens];
    let mut out_flags = vec![vec![false; tokens]; flags.len()];
    let (mut t0, mut w0) = (0usize, 0usize);
    for (&nt, &nw) in tok_counts.iter().zip(word_counts) {
        let (nt, nw) = (nt as usize, nw as usize);
        let ws = &word_starts[w0..w0 + nw];
        let we = &word_ends[w0..w0 + nw];
        // Tokens come in order of their start, so the two searches move forward; a token
        // that starts before the previous one searches again from scratch.
        let (mut first, mut last_end) = (0usize, 0usize);
        let (mut prev_s, mut prev_e) = (i64::MIN, i64::MIN);
        for i in t0..t0 + nt {
            let (s, e) = (tok_starts[i], tok_ends[i]);
            if s < prev_s {
                first = 0;
            }
            if e < prev_e {
                last_end = 0;
            }
            (prev_s, prev_e) = (s, e);
            while first < nw && we[first] <= s {
                first += 1; // the first word that ends after the token starts
            }
            while last_end < nw && ws[last_end] < e {
                last_end += 1; // words that start before the token ends: ..last_end
            }
            if e <= s || first >= nw || last_end == 0 || last_end - 1 < first {
                continue;
            }
            let last = last_end - 1;
            out_words[i] = first as i64;
            for (f, p) in prefix.iter().enumerate() {
                out_flags[f][i] = p[w0 + last + 1] > p[w0 + first];
            }
        }
        t0 += nt;
        w0 += nw;
    }
    Ok(Aligned {
        words: out_words,
        flags: out_flags,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_take_the_first_word_and_every_flag_they_overlap() {
        // Text 0: words [0,3) [4,7); tokens [0,2) [2,5) [5,7) [7,8). Text 1: one word [1,3).
        let flag = [false, true, true];
        let a = align(
            &[0, 2, 5, 7, 0, 1],
            &[2, 5, 7, 8, 1, 3],
            &[4, 2],
            &[0, 4, 1],
            &[3, 7, 3],
            &[2, 1],
            &[&flag],
        )
        .unwrap();
        assert_eq!(a.words, vec![0, 0, 1, -1, -1, 0]);
        assert_eq!(a.flags[0], vec![false, true, true, false, false, true]);
    }
}

//! The two hot loops of the surrogate stage (DESIGN.md §7):
//!
//! * [`KeyedHasher`]: a keyed draw, `HMAC-SHA256(secret, parts)` read as a `u64`. Every
//!   surrogate is chosen from such draws, so it is a pure function of the secret and the
//!   placeholder's key (patient, category, id...), never of the order of processing; without
//!   the secret the mapping cannot be recomputed.
//! * [`splice`]: replace code-point ranges of a text and report where the replacements landed,
//!   in code points of the new text (the gold `spans`).

use arrow_array::builder::LargeStringBuilder;
use arrow_array::LargeStringArray;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::{CoreError, Result};
use crate::text::StrCol;

/// HMAC-SHA256 under one secret, over messages made of parts.
///
/// Each part is framed by its length (8 bytes, little-endian; a null part is framed as
/// `u64::MAX` with no bytes), so `("ab", "c")`, `("a", "bc")` and `(null, "")` are distinct
/// messages. The draw is the first 8 bytes of the MAC, big-endian.
#[derive(Clone)]
pub struct KeyedHasher {
    base: Hmac<Sha256>,
}

impl KeyedHasher {
    /// A hasher keyed by `secret` (any length; HMAC hashes long keys).
    pub fn new(secret: &[u8]) -> Result<Self> {
        let base = <Hmac<Sha256> as Mac>::new_from_slice(secret)
            .map_err(|_| CoreError::InvalidArgument("invalid HMAC key".into()))?;
        Ok(Self { base })
    }

    /// The draw of one message.
    pub fn draw(&self, parts: &[Option<&[u8]>]) -> u64 {
        let mut mac = self.base.clone();
        for part in parts {
            match part {
                None => mac.update(&u64::MAX.to_le_bytes()),
                Some(p) => {
                    mac.update(&(p.len() as u64).to_le_bytes());
                    mac.update(p);
                }
            }
        }
        let out = mac.finalize().into_bytes();
        let mut first = [0u8; 8];
        first.copy_from_slice(&out[..8]);
        u64::from_be_bytes(first)
    }
}

/// Byte offset of the code point `k` code points after byte `from`, or None past the end
/// (`k` may land exactly on the end).
fn advance(bytes: &[u8], from: usize, k: usize) -> Option<usize> {
    if k == 0 {
        return Some(from);
    }
    let mut seen = 0usize;
    for (i, &b) in bytes[from..].iter().enumerate() {
        if b & 0xC0 != 0x80 {
            if seen == k {
                return Some(from + i);
            }
            seen += 1;
        }
    }
    (seen == k).then_some(bytes.len())
}

/// Replace `edits` (code-point ranges `start..end` of `text`, sorted and not overlapping)
/// by their strings, appending the result to `out`. Returns each replacement's code-point
/// range in the new text.
pub fn splice(
    text: &str,
    edits: &[(usize, usize, &str)],
    out: &mut String,
) -> Result<Vec<(usize, usize)>> {
    let bytes = text.as_bytes();
    let (mut byte, mut cp) = (0usize, 0usize);
    let mut shift: i64 = 0;
    let mut placed = Vec::with_capacity(edits.len());
    for (n, &(start, end, with)) in edits.iter().enumerate() {
        if start < cp || end < start {
            return Err(CoreError::InvalidArgument(format!(
                "edit {n} overlaps the previous one or ends before it starts"
            )));
        }
        let beyond = || CoreError::InvalidArgument(format!("edit {n} ends beyond its text"));
        let a = advance(bytes, byte, start - cp).ok_or_else(beyond)?;
        let b = advance(bytes, a, end - start).ok_or_else(beyond)?;
        out.push_str(&text[byte..a]);
        out.push_str(with);
        let len = with.chars().count();
        let new_start = (start as i64 + shift) as usize;
        placed.push((new_start, new_start + len));
        shift += len as i64 - (end - start) as i64;
        (byte, cp) = (b, end);
    }
    out.push_str(&text[byte..]);
    Ok(placed)
}

/// The spliced texts of a column and the new code-point range of every edit.
pub struct Spliced {
    pub texts: LargeStringArray,
    pub starts: Vec<i32>,
    pub ends: Vec<i32>,
}

/// [`splice`] over a column: edit `i` replaces `starts[i]..ends[i]` of `texts[rows[i]]` by
/// `with[i]`. Rows must not decrease, and edits of one row must be sorted and disjoint.
pub fn splice_column(
    texts: &StrCol<'_>,
    rows: &[u64],
    starts: &[i32],
    ends: &[i32],
    with: &StrCol<'_>,
) -> Result<Spliced> {
    let n = rows.len();
    if starts.len() != n || ends.len() != n || with.len() != n {
        return Err(CoreError::InvalidArgument(
            "rows, starts, ends and replacements must have the same length".into(),
        ));
    }
    let mut builder = LargeStringBuilder::with_capacity(texts.len(), 0);
    let (mut new_starts, mut new_ends) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mut edits: Vec<(usize, usize, &str)> = Vec::new();
    let mut out = String::new();
    let mut next = 0usize;
    for row in 0..texts.len() {
        let first = next;
        while next < n && rows[next] as usize == row {
            next += 1;
        }
        if next < n && (rows[next] as usize) < row {
            return Err(CoreError::InvalidArgument(format!(
                "edit {next}: rows must not decrease"
            )));
        }
        let Some(text) = texts.get(row) else {
            if next > first {
                return Err(CoreError::Null { what: "text", row });
            }
            builder.append_null();
            continue;
        };
        edits.clear();
        for i in first..next {
            let (s, e) = (starts[i], ends[i]);
            let w = with.get(i).ok_or(CoreError::Null {
                what: "replacement",
                row: i,
            })?;
            if s < 0 || e < 0 {
                return Err(CoreError::InvalidArgument(format!(
                    "edit {i} has a negative offset"
                )));
            }
            edits.push((s as usize, e as usize, w));
        }
        out.clear();
        let placed = splice(text, &edits, &mut out).map_err(|e| match e {
            CoreError::InvalidArgument(m) => CoreError::InvalidArgument(format!("row {row}: {m}")),
            other => other,
        })?;
        for (s, e) in placed {
            let fit = |v: usize| {
                i32::try_from(v).map_err(|_| {
                    CoreError::InvalidArgument(format!("row {row}: offsets exceed int32"))
                })
            };
            new_starts.push(fit(s)?);
            new_ends.push(fit(e)?);
        }
        builder.append_value(&out);
    }
    if next < n {
        return Err(CoreError::InvalidArgument(format!(
            "edit {next} points at row {}, beyond the {} texts",
            rows[next],
            texts.len()
        )));
    }
    Ok(Spliced {
        texts: builder.finish(),
        starts: new_starts,
        ends: new_ends,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str, edits: &[(usize, usize, &str)]) -> (String, Vec<(usize, usize)>) {
        let mut out = String::new();
        let placed = splice(text, edits, &mut out).unwrap();
        (out, placed)
    }

    #[test]
    fn splices_and_places_in_code_points() {
        let (out, placed) = run("é [**A 1**] ü [**B**]!", &[(2, 11, "Zoë"), (14, 21, "Q")]);
        assert_eq!(out, "é Zoë ü Q!");
        let chars: Vec<char> = out.chars().collect();
        let got: Vec<String> = placed
            .iter()
            .map(|&(s, e)| chars[s..e].iter().collect())
            .collect();
        assert_eq!(got, ["Zoë", "Q"]);
    }

    #[test]
    fn empty_and_edge_edits() {
        assert_eq!(run("", &[]).0, "");
        assert_eq!(
            run("abc", &[(0, 0, "x"), (3, 3, "y")]),
            ("xabcy".into(), vec![(0, 1), (4, 5)])
        );
        assert_eq!(run("abc", &[(0, 3, "")]), (String::new(), vec![(0, 0)]));
    }

    #[test]
    fn rejects_bad_edits() {
        let mut out = String::new();
        assert!(splice("abc", &[(1, 4, "x")], &mut out).is_err());
        assert!(splice("abc", &[(2, 3, "x"), (1, 2, "y")], &mut out).is_err());
        assert!(splice("abc", &[(2, 1, "x")], &mut out).is_err());
    }

    #[test]
    fn draws_are_keyed_and_framed() {
        let h = KeyedHasher::new(b"secret").unwrap();
        let a = h.draw(&[Some(b"ab"), Some(b"c")]);
        assert_eq!(a, h.draw(&[Some(b"ab"), Some(b"c")]));
        assert_ne!(a, h.draw(&[Some(b"a"), Some(b"bc")]));
        assert_ne!(h.draw(&[None]), h.draw(&[Some(b"")]));
        assert_ne!(
            a,
            KeyedHasher::new(b"other")
                .unwrap()
                .draw(&[Some(b"ab"), Some(b"c")])
        );
    }
}

//! An exact string interner: each distinct string gets a dense `u32` id, in order of first
//! insertion. Lookups hash once and compare strings, so ids never collide.

use hashbrown::HashTable;
use std::hash::BuildHasher;

/// A string ready to look up: its hash and its fingerprint.
///
/// Strings of up to 7 bytes are their own fingerprint (length in the top byte, bytes below),
/// so comparing fingerprints compares them exactly without reading the arena, and their hash
/// is one multiply of it; longer strings keep 56 bits of their hash under a 0xFF top byte, and
/// a match is confirmed against the arena.
#[derive(Debug, Clone, Copy)]
pub struct Term<'a> {
    pub text: &'a str,
    pub hash: u64,
    fp: u64,
}

/// The hash of a short string's fingerprint.
#[inline(always)]
fn hash_short(fp: u64) -> u64 {
    let p = (fp as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (p as u64) ^ ((p >> 64) as u64)
}

impl<'a> Term<'a> {
    /// Hash and fingerprint `text`.
    #[inline]
    pub fn new(text: &'a str) -> Self {
        let b = text.as_bytes();
        if b.len() <= 7 {
            let mut w = [0u8; 8];
            w[..b.len()].copy_from_slice(b);
            Self::short(text, u64::from_le_bytes(w))
        } else {
            let hash = rustc_hash::FxBuildHasher.hash_one(text);
            Self {
                text,
                hash,
                fp: (hash & 0x00ff_ffff_ffff_ffff) | 0xff << 56,
            }
        }
    }

    /// A string of at most 7 bytes whose bytes, little-endian, are `bytes` (zero above).
    #[inline(always)]
    pub fn short(text: &'a str, bytes: u64) -> Self {
        debug_assert!(text.len() <= 7);
        let fp = bytes | (text.len() as u64) << 56;
        Self {
            text,
            hash: hash_short(fp),
            fp,
        }
    }
}

/// Interned strings stored back to back in one arena.
#[derive(Default, Debug)]
pub struct Vocab {
    /// (fingerprint, id) of every string.
    table: HashTable<(u64, u32)>,
    ends: Vec<usize>,
    hashes: Vec<u64>,
    arena: String,
}

impl Vocab {
    /// Number of distinct strings.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether nothing is interned.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The string with id `id`.
    #[inline]
    pub fn get(&self, id: u32) -> &str {
        let id = id as usize;
        let start = if id == 0 { 0 } else { self.ends[id - 1] };
        &self.arena[start..self.ends[id]]
    }

    /// The id of `t`, if interned.
    #[inline]
    pub fn find(&self, t: &Term<'_>) -> Option<u32> {
        let fp = t.fp;
        let short = t.text.len() <= 7;
        self.table
            .find(t.hash, |&(f, id)| {
                f == fp && (short || self.get(id).as_bytes() == t.text.as_bytes())
            })
            .map(|&(_, id)| id)
    }

    /// The id of `t`, interning it if new.
    pub fn intern(&mut self, t: &Term<'_>) -> u32 {
        if let Some(id) = self.find(t) {
            return id;
        }
        let id = u32::try_from(self.ends.len()).expect("more than 2^32 distinct words");
        self.arena.push_str(t.text);
        self.ends.push(self.arena.len());
        self.hashes.push(t.hash);
        let hashes = &self.hashes;
        self.table
            .insert_unique(t.hash, (t.fp, id), |&(_, i)| hashes[i as usize]);
        id
    }

    /// The id of `s`, interning it if new.
    pub fn intern_str(&mut self, s: &str) -> u32 {
        self.intern(&Term::new(s))
    }

    /// Approximate heap bytes held.
    /// Bytes of all the words' text together.
    pub fn text_bytes(&self) -> usize {
        self.arena.len()
    }

    pub fn memory_bytes(&self) -> usize {
        self.table.capacity() * (std::mem::size_of::<(u64, u32)>() + 1)
            + self.ends.capacity() * std::mem::size_of::<usize>()
            + self.hashes.capacity() * std::mem::size_of::<u64>()
            + self.arena.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A term with a forced hash, to test collisions.
    fn forced(text: &str, hash: u64) -> Term<'_> {
        let t = Term::new(text);
        let fp = if text.len() <= 7 {
            t.fp
        } else {
            (hash & 0x00ff_ffff_ffff_ffff) | 0xff << 56
        };
        Term { hash, fp, ..t }
    }

    #[test]
    fn interns_exactly() {
        let mut v = Vocab::default();
        let a = v.intern_str("alpha");
        let b = v.intern_str("beta");
        assert_eq!((a, b), (0, 1));
        assert_eq!(v.intern_str("alpha"), 0);
        // A forced hash collision still keeps the strings apart.
        let h = Term::new("alpha").hash;
        let c = v.intern(&forced("gamma", h));
        assert_eq!(c, 2);
        assert_eq!(v.find(&forced("gamma", h)), Some(2));
        assert_eq!(v.get(1), "beta");
        // Short strings with equal hashes but different bytes or lengths stay apart too, and
        // long strings whose hashes (hence fingerprints) are equal are compared by bytes.
        let x = v.intern(&forced("x", h));
        let y = v.intern(&forced("x\0", h));
        let long1 = v.intern(&forced("abcdefghij", h));
        let long2 = v.intern(&forced("abcdefghik", h));
        assert_eq!((x, y, long1, long2), (3, 4, 5, 6));
        assert_eq!(v.find(&forced("x\0", h)), Some(4));
        assert_eq!(v.find(&forced("abcdefghik", h)), Some(6));
        assert_eq!(v.len(), 7);
    }

    #[test]
    fn short_terms_from_bytes_equal_terms_from_text() {
        for s in ["", "a", "abc", "1234567"] {
            let mut w = [0u8; 8];
            w[..s.len()].copy_from_slice(s.as_bytes());
            let t = Term::short(s, u64::from_le_bytes(w));
            let u = Term::new(s);
            assert_eq!((t.hash, t.fp), (u.hash, u.fp));
        }
    }
}

//! An exact string interner: each distinct string gets a dense `u32` id, in order of first
//! insertion. Lookups hash once and compare strings, so ids never collide.

use hashbrown::HashTable;
use std::hash::BuildHasher;

/// The hash the vocabulary uses for strings.
#[inline]
pub fn hash_str(s: &str) -> u64 {
    rustc_hash::FxBuildHasher.hash_one(s)
}

/// A string's fingerprint in the table: strings of up to 7 bytes are stored whole (length in
/// the top byte, bytes below), so comparing fingerprints compares them exactly without reading
/// the arena; longer strings keep 56 bits of their hash under a 0xFF top byte, and a match is
/// confirmed against the arena.
#[inline(always)]
fn fingerprint(hash: u64, s: &[u8]) -> u64 {
    if s.len() <= 7 {
        let mut b = [0u8; 8];
        b[..s.len()].copy_from_slice(s);
        u64::from_le_bytes(b) | (s.len() as u64) << 56
    } else {
        (hash & 0x00ff_ffff_ffff_ffff) | 0xff << 56
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

    /// The id of `s` (whose hash is `hash`), if interned.
    #[inline]
    pub fn find(&self, hash: u64, s: &str) -> Option<u32> {
        let bytes = s.as_bytes();
        let fp = fingerprint(hash, bytes);
        let short = bytes.len() <= 7;
        self.table
            .find(hash, |&(f, id)| {
                f == fp && (short || self.get(id).as_bytes() == bytes)
            })
            .map(|&(_, id)| id)
    }

    /// The id of `s`, interning it if new.
    pub fn intern(&mut self, hash: u64, s: &str) -> u32 {
        if let Some(id) = self.find(hash, s) {
            return id;
        }
        let id = u32::try_from(self.ends.len()).expect("more than 2^32 distinct words");
        self.arena.push_str(s);
        self.ends.push(self.arena.len());
        self.hashes.push(hash);
        let hashes = &self.hashes;
        let fp = fingerprint(hash, s.as_bytes());
        self.table
            .insert_unique(hash, (fp, id), |&(_, i)| hashes[i as usize]);
        id
    }

    /// Approximate heap bytes held.
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

    #[test]
    fn interns_exactly() {
        let mut v = Vocab::default();
        let a = v.intern(hash_str("alpha"), "alpha");
        let b = v.intern(hash_str("beta"), "beta");
        assert_eq!((a, b), (0, 1));
        assert_eq!(v.intern(hash_str("alpha"), "alpha"), 0);
        // A forced hash collision still keeps the strings apart.
        let c = v.intern(hash_str("alpha"), "gamma");
        assert_eq!(c, 2);
        assert_eq!(v.find(hash_str("alpha"), "gamma"), Some(2));
        assert_eq!(v.get(1), "beta");
        // Short strings with equal hashes but different bytes or lengths stay apart too.
        let h = hash_str("x");
        let x = v.intern(h, "x");
        let y = v.intern(h, "x\0");
        let long1 = v.intern(h, "abcdefghij");
        let long2 = v.intern(h, "abcdefghik");
        assert_eq!((x, y, long1, long2), (3, 4, 5, 6));
        assert_eq!(v.find(h, "x\0"), Some(4));
        assert_eq!(v.find(h, "abcdefghik"), Some(6));
        assert_eq!(v.len(), 7);
    }
}

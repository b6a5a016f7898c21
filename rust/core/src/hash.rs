//! Term keys and the crate's integer hashes; a leaf module (it uses no other module of the
//! crate).
//!
//! * [`Key`]: an n-gram key, up to four word ids packed into a `u128`.
//! * [`key_hash`]: the hash of a key that picks a shard and a slot of the index's table.
//! * [`partition_hash`]: the independent hash of a key that assigns it to a partition.
//! * [`id_hash`]: the fixed hash of an id string that orders the patients a term keeps.
//! * `mix64` (crate-private): SplitMix64's output function, shared by [`partition_hash`],
//!   [`id_hash`] and the masking random generator.

/// An n-gram key: word ids + 1 in 32-bit slots, slot 0 holding the first word.
pub type Key = u128;

/// SplitMix64's output function.
#[inline]
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The hash of a key: a folded 64x64->128 multiply of its halves. The top bits pick the
/// shard, the low bits the slot.
#[inline(always)]
pub fn key_hash(key: Key) -> u64 {
    let a = (key as u64) ^ 0x243f_6a88_85a3_08d3;
    let b = ((key >> 64) as u64) ^ 0x1319_8a2e_0370_7344;
    let p = (a as u128).wrapping_mul(b as u128 | 1);
    let x = (p as u64) ^ ((p >> 64) as u64);
    // One more multiply-fold so that keys differing in few bits spread everywhere.
    let q = (x as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (q as u64) ^ ((q >> 64) as u64)
}

/// The hash that assigns a term to a partition and a shard. It is independent of the hash
/// the maps use, so fixing its residue does not cluster the maps' buckets.
#[inline]
pub fn partition_hash(key: Key) -> u64 {
    mix64((key as u64) ^ mix64((key >> 64) as u64 ^ 0x9e37_79b9_7f4a_7c15))
}

/// FNV-1a's 64-bit offset basis and prime.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

/// The fixed 64-bit hash of an id (a patient id): 64-bit FNV-1a over its UTF-8 bytes,
/// finished with SplitMix64's output function ([`mix64`]).
///
/// The index keeps, per term, the `k` patients with the smallest `(id_hash(id), id)`, so that
/// the kept ids depend on neither the order of the documents nor the sharding of the corpus,
/// and partial indexes merge exactly (`phisieve._core.id_hashes` gives the same hash to
/// Python). **Stable across versions**: it is unkeyed and its definition must never change,
/// since indexes written by different versions are merged together; the unit test pins it.
#[inline]
pub fn id_hash(id: &str) -> u64 {
    let mut h = FNV_OFFSET;
    for &b in id.as_bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(FNV_PRIME);
    }
    mix64(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_hash_is_pinned() {
        // FNV-1a 64 of "" is its offset basis, of "a" the published 0xaf63dc4c8601ec8c.
        assert_eq!(id_hash(""), mix64(FNV_OFFSET));
        assert_eq!(id_hash("a"), mix64(0xaf63_dc4c_8601_ec8c));
        // Fixed values: changing them breaks the merge of indexes written before.
        assert_eq!(id_hash(""), 0xf52a_15e9_a9b5_e89b);
        assert_eq!(id_hash("a"), 0x02c0_bdbf_4814_20f8);
        assert_eq!(id_hash("p1"), 0x5b05_0ef5_7e3b_95bc);
        assert_eq!(id_hash("Zoë-17"), 0x88f7_d8c4_c0c1_18b4);
    }
}

//! Term keys and the crate's integer hashes; a leaf module (it uses no other module of the
//! crate).
//!
//! * [`Key`]: an n-gram key, up to four word ids packed into a `u128`.
//! * [`key_hash`]: the hash of a key that picks a shard and a slot of the index's table.
//! * [`partition_hash`]: the independent hash of a key that assigns it to a partition.
//! * `mix64` (crate-private): SplitMix64's output function, shared by [`partition_hash`] and
//!   the masking random generator.

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

//! The index's term table: open addressing with linear probing over one slot array, so that a
//! slot's address is known from the hash alone and can be prefetched ahead of the update.
//! Large corpora make most updates cache misses; prefetching a few updates ahead overlaps them.

use crate::hash::{key_hash, Key};

/// Totals of one term.
#[derive(Debug, Clone, Copy, Default)]
pub struct Entry {
    pub count: u64,
    pub docs: u32,
    pub patients: u32,
    /// Tags (never 0) of the last document and patient counted, so that each is counted
    /// once (the input is grouped by patient); 0 before the first.
    pub last_doc: u32,
    pub last_patient: u32,
    /// The smallest and the largest of the up-to-`k` patients the term keeps (the `k` smallest
    /// by `id_hash` of the id; one patient: `owners[0]` only). See `index::keep_owner`.
    pub owners: [u32; 2],
}

/// A slot: key 0 marks an empty slot (real keys always hold a word id + 1). All zero bits
/// are an empty slot, so tables are allocated zeroed (pages come zeroed from the OS).
#[derive(Clone, Copy)]
#[repr(C)]
struct Slot {
    key: Key,
    entry: Entry,
}

/// `n` empty slots, allocated zeroed.
fn empty_slots(n: usize) -> Vec<Slot> {
    let layout = std::alloc::Layout::array::<Slot>(n).expect("table size");
    // SAFETY: the layout has non-zero size (n > 0, Slot is 48 bytes); every field of Slot is
    // an integer, so all-zero memory is a valid (empty) Slot; the Vec takes ownership of an
    // allocation made with the global allocator and exactly this layout.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout) as *mut Slot;
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Vec::from_raw_parts(ptr, n, n)
    }
}

/// A hash table from n-gram keys to [`Entry`].
#[derive(Default)]
pub struct Table {
    slots: Vec<Slot>,
    mask: usize,
    len: usize,
}

impl Table {
    /// Number of terms.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no terms.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Heap bytes held.
    pub fn memory_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
    }

    /// Hint the CPU to fetch the slot `hash` starts probing at.
    #[inline(always)]
    pub fn prefetch(&self, hash: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            let p = self.slots.as_ptr().wrapping_add(hash as usize & self.mask);
            // SAFETY: prefetching is a hint; it never faults, whatever the address.
            // A slot may straddle two cache lines: fetch both.
            unsafe {
                core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0);
                core::arch::x86_64::_mm_prefetch(
                    (p as *const i8).wrapping_add(std::mem::size_of::<Slot>() - 1),
                    core::arch::x86_64::_MM_HINT_T0,
                );
            };
        }
    }

    /// Hint the CPU to fetch slot `i`.
    #[inline(always)]
    pub fn prefetch_slot(&self, i: usize) {
        self.prefetch(i as u64);
    }

    /// The entry of `key` (whose hash is `hash`), inserted empty if new.
    #[inline(always)]
    pub fn entry(&mut self, key: Key, hash: u64) -> &mut Entry {
        if (self.len + 1) * 8 > self.slots.len() * 5 {
            self.grow();
        }
        let mut i = hash as usize & self.mask;
        loop {
            let k = self.slots[i].key;
            if k == key {
                return &mut self.slots[i].entry;
            }
            if k == 0 {
                self.len += 1;
                self.slots[i].key = key;
                return &mut self.slots[i].entry;
            }
            i = (i + 1) & self.mask;
        }
    }

    fn grow(&mut self) {
        let cap = (self.slots.len() * 2).max(16);
        let old = std::mem::replace(&mut self.slots, empty_slots(cap));
        self.mask = cap - 1;
        for slot in old.into_iter().filter(|s| s.key != 0) {
            let mut i = key_hash(slot.key) as usize & self.mask;
            while self.slots[i].key != 0 {
                i = (i + 1) & self.mask;
            }
            self.slots[i] = slot;
        }
    }

    /// The slot numbers of every term, in slot order, with their keys.
    pub fn occupied(&self) -> impl Iterator<Item = (usize, Key)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.key != 0)
            .map(|(i, s)| (i, s.key))
    }

    /// The key and entry in slot `i` (an occupied slot).
    #[inline]
    pub fn at(&self, i: usize) -> (Key, &Entry) {
        let s = &self.slots[i];
        (s.key, &s.entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserts_finds_and_grows() {
        let mut t = Table::default();
        for k in 1..=10_000u128 {
            t.entry(k << 32 | 7, key_hash(k << 32 | 7)).count += k as u64;
        }
        for k in 1..=10_000u128 {
            t.entry(k << 32 | 7, key_hash(k << 32 | 7)).count += 1;
        }
        assert_eq!(t.len(), 10_000);
        let mut all: Vec<_> = t.occupied().map(|(i, k)| (k, t.at(i).1.count)).collect();
        all.sort();
        assert_eq!(all[0], (1 << 32 | 7, 2));
        assert_eq!(all[9_999], (10_000 << 32 | 7, 10_001));
    }
}

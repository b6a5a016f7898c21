//! The patient x term index.
//!
//! For every term (a normalised word n-gram, n = 1..=N) the index counts the distinct
//! patients that use it, the documents that contain it and its occurrences. A term is an
//! indirect identifier when fewer than `k` patients use it.
//!
//! # How it stays exact, fast and bounded
//! * Input is a stream of record batches whose rows are **grouped by patient** (all documents of
//!   a patient contiguous; a group may straddle batches). Each patient's terms are first
//!   deduplicated in a patient-local map, so the global maps see every (term, patient) pair
//!   exactly once and the distinct-patient count is a plain sum. A patient that reappears after
//!   other patients is an error ([`CoreError::NotGrouped`]); the Python layer sorts such input.
//! * Words are interned to dense `u32` ids (exact, string-compared); an n-gram key packs up to
//!   four ids into a `u128`, so keys are exact too (no hashing of terms into sketches).
//! * Work is parallel per batch: tokenising by document, counting by patient, and merging into
//!   64 hash shards by shard. Counts are sums, so results do not depend on threads or batching.
//! * A partition `(modulus, residue)` keeps only the terms whose key hashes to `residue`
//!   modulo `modulus`: several passes with residues `0..modulus` cover every term once, each
//!   pass holding a `1/modulus` share of the terms in memory.

use crate::error::{CoreError, Result};
use crate::normalize::Normalizer;
use crate::text::StrCol;
use crate::vocab::{hash_str, Vocab};
use crate::words::for_each_word;
use crate::MAX_N;
use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::{ArrayRef, BooleanArray, RecordBatch, UInt32Array, UInt64Array, UInt8Array};
use arrow_schema::{DataType, Field, Schema};
use rayon::prelude::*;
use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex};

/// An n-gram key: word ids + 1 in 32-bit slots, slot 0 holding the first word.
pub type Key = u128;
const SHARDS: usize = 64;
const MISS: u32 = u32::MAX;
/// Rows per output record batch.
const OUTPUT_ROWS: usize = 1 << 20;

/// Options of an index run.
#[derive(Debug, Clone)]
pub struct IndexConfig {
    /// Largest n-gram length, 1..=4.
    pub max_n: usize,
    /// A term is indirect when fewer than `k` patients use it; up to `k` patient ids are kept
    /// per term so that partial indexes merge exactly for that test.
    pub k: u32,
    /// How words become terms.
    pub normalizer: Normalizer,
    /// Keep only terms with `partition_hash(key) % modulus == residue`.
    pub modulus: u32,
    pub residue: u32,
    /// Worker threads; 0 uses rayon's global pool.
    pub threads: usize,
}

impl Default for IndexConfig {
    fn default() -> Self {
        Self {
            max_n: 1,
            k: 2,
            normalizer: Normalizer::default(),
            modulus: 1,
            residue: 0,
            threads: 0,
        }
    }
}

impl IndexConfig {
    fn validate(&self) -> Result<()> {
        if !(1..=MAX_N).contains(&self.max_n) {
            return Err(CoreError::InvalidArgument(format!(
                "ngram must be between 1 and {MAX_N}, got {}",
                self.max_n
            )));
        }
        if self.k == 0 {
            return Err(CoreError::InvalidArgument("k must be at least 1".into()));
        }
        if self.modulus == 0 || self.residue >= self.modulus {
            return Err(CoreError::InvalidArgument(format!(
                "partition residue {} must be below modulus {} (and modulus > 0)",
                self.residue, self.modulus
            )));
        }
        Ok(())
    }
}

#[inline]
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The hash that assigns a term to a partition and a shard. It is independent of the hash
/// the maps use, so fixing its residue does not cluster the maps' buckets.
#[inline]
pub fn partition_hash(key: Key) -> u64 {
    mix64((key as u64) ^ mix64((key >> 64) as u64 ^ 0x9e37_79b9_7f4a_7c15))
}

/// The number of words in a key.
#[inline]
pub fn key_len(key: Key) -> usize {
    let mut n = 0;
    while n < MAX_N && (key >> (32 * n)) as u32 != 0 {
        n += 1;
    }
    n
}

/// Per-term totals. `owners` holds the smallest patient indices (first-seen order) that use
/// the term when `k <= 2`; larger `k` keeps them in the shard's `extra_owners`.
#[derive(Debug, Clone, Copy)]
struct Acc {
    count: u64,
    docs: u32,
    patients: u32,
    owners: [u32; 2],
}

impl Default for Acc {
    fn default() -> Self {
        Self { count: 0, docs: 0, patients: 0, owners: [u32::MAX; 2] }
    }
}

/// Per-term totals within one patient.
#[derive(Debug, Clone, Copy, Default)]
struct LocalAcc {
    count: u64,
    docs: u32,
    last_doc: u32,
}

type LocalMap = FxHashMap<Key, LocalAcc>;

/// One of the hash shards of the global term map.
#[derive(Default)]
struct Shard {
    map: FxHashMap<Key, Acc>,
    extra_owners: FxHashMap<Key, Vec<u32>>,
}

impl Shard {
    /// Add one patient's totals of one term. Commutative: the result does not depend on the
    /// order in which patients arrive.
    #[inline]
    fn add(&mut self, key: Key, l: &LocalAcc, patient: u32, cap: u32) {
        let acc = self.map.entry(key).or_default();
        acc.count += l.count;
        acc.docs += l.docs;
        acc.patients += 1;
        if cap <= 2 {
            let o = &mut acc.owners;
            if patient < o[0] {
                o[1] = o[0];
                o[0] = patient;
            } else if patient < o[1] {
                o[1] = patient;
            }
        } else {
            let v = self.extra_owners.entry(key).or_default();
            let pos = v.partition_point(|&x| x < patient);
            if pos < cap as usize {
                v.insert(pos, patient);
                v.truncate(cap as usize);
            }
        }
    }
}

/// The patient whose documents may continue in the next batch.
struct Open {
    patient: u32,
    local: LocalMap,
}

/// Reusable per-thread buffers for counting one patient.
#[derive(Default)]
struct Scratch {
    local: LocalMap,
    sorted: Vec<(Key, LocalAcc)>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// One output row of the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermRow {
    pub term: String,
    pub n: u8,
    pub patients: u32,
    pub docs: u32,
    pub count: u64,
    pub indirect: bool,
    /// Up to `k` ids of patients using the term: the first ones in input order.
    pub patient_ids: Vec<String>,
}

/// Totals of a finished index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexTotals {
    pub documents: u64,
    pub tokens: u64,
    pub patients: u64,
}

/// Builds the patient x term index from batches of (patient id, text).
pub struct IndexBuilder {
    cfg: IndexConfig,
    vocab: Vocab,
    patients: Vocab,
    finished_patients: Vec<bool>,
    shards: Vec<Mutex<Shard>>,
    open: Option<Open>,
    pool: Option<Arc<rayon::ThreadPool>>,
    batches: u64,
    documents: u64,
    tokens: u64,
    done: bool,
}

impl IndexBuilder {
    /// A new, empty index.
    pub fn new(cfg: IndexConfig) -> Result<Self> {
        cfg.validate()?;
        let pool = if cfg.threads > 0 {
            Some(Arc::new(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(cfg.threads)
                    .build()
                    .map_err(|e| CoreError::InvalidArgument(e.to_string()))?,
            ))
        } else {
            None
        };
        Ok(Self {
            cfg,
            vocab: Vocab::default(),
            patients: Vocab::default(),
            finished_patients: Vec::new(),
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            open: None,
            pool,
            batches: 0,
            documents: 0,
            tokens: 0,
            done: false,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &IndexConfig {
        &self.cfg
    }

    fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.pool {
            Some(pool) => pool.install(f),
            None => f(),
        }
    }

    /// Approximate heap bytes held (maps, vocabularies, the open patient).
    pub fn memory_bytes(&self) -> usize {
        let entry = std::mem::size_of::<(Key, Acc)>() + 1;
        let local = std::mem::size_of::<(Key, LocalAcc)>() + 1;
        let shards: usize = self
            .shards
            .iter()
            .map(|s| {
                let s = s.lock().expect("shard lock");
                s.map.capacity() * entry
                    + s.extra_owners.capacity() * (std::mem::size_of::<(Key, Vec<u32>)>() + 1)
                    + s.extra_owners.len() * self.cfg.k as usize * 4
            })
            .sum();
        self.vocab.memory_bytes()
            + self.patients.memory_bytes()
            + shards
            + self.open.as_ref().map_or(0, |r| r.local.capacity() * local)
    }

    /// Distinct terms counted so far (excluding the open patient's new terms).
    pub fn num_terms(&self) -> usize {
        self.shards.iter().map(|s| s.lock().expect("shard lock").map.len()).sum()
    }

    /// Add a batch: `patient_ids[i]` wrote `texts[i]` (one document per row).
    pub fn add(&mut self, patient_ids: &ArrayRef, texts: &ArrayRef) -> Result<()> {
        if self.done {
            return Err(CoreError::Finished);
        }
        let pids = StrCol::new(patient_ids, "patient_id")?;
        let texts = StrCol::new(texts, "text")?;
        if pids.len() != texts.len() {
            return Err(CoreError::InvalidArgument(format!(
                "patient_id has {} rows but text has {}",
                pids.len(),
                texts.len()
            )));
        }
        let batch_no = self.batches;
        self.batches += 1;
        let rows = texts.len();
        if rows == 0 {
            return Ok(());
        }
        // Runs of consecutive rows of one patient, checking that patients are grouped.
        let mut runs: Vec<(u32, usize, usize)> = Vec::new();
        let mut current = self.open.as_ref().map(|r| r.patient);
        for row in 0..rows {
            let pid = pids.get(row).ok_or(CoreError::Null { what: "patient_id", row })?;
            if texts.get(row).is_none() {
                return Err(CoreError::Null { what: "text", row });
            }
            let p = self.patients.intern(hash_str(pid), pid);
            if p as usize == self.finished_patients.len() {
                self.finished_patients.push(false);
            }
            match runs.last_mut() {
                Some(last) if last.0 == p => last.2 = row + 1,
                _ => {
                    if Some(p) != current {
                        if let Some(c) = current {
                            self.finished_patients[c as usize] = true;
                        }
                        if self.finished_patients[p as usize] {
                            self.done = true;
                            return Err(CoreError::NotGrouped { batch: batch_no, row });
                        }
                        current = Some(p);
                    }
                    runs.push((p, row, row + 1));
                }
            }
        }

        let norm = self.cfg.normalizer;
        let vocab = &self.vocab;
        // Phase 1 (parallel by document): words -> normalised -> known ids; misses kept aside.
        let mut docs: Vec<(Vec<u32>, Vec<(u32, u64, String)>)> = self.install(|| {
            (0..rows)
                .into_par_iter()
                .map(|row| {
                    let text = texts.get(row).unwrap_or("");
                    let mut ids = Vec::with_capacity(text.len() / 6 + 1);
                    let mut misses = Vec::new();
                    let mut buf = String::new();
                    for_each_word(text, |s, e| {
                        buf.clear();
                        norm.normalize_into(&text[s..e], &mut buf);
                        let h = hash_str(&buf);
                        match vocab.find(h, &buf) {
                            Some(id) => ids.push(id),
                            None => {
                                misses.push((ids.len() as u32, h, buf.clone()));
                                ids.push(MISS);
                            }
                        }
                    });
                    (ids, misses)
                })
                .collect()
        });
        // Phase 2 (sequential, row order): intern new words, so ids follow first occurrence.
        for (ids, misses) in docs.iter_mut() {
            self.tokens += ids.len() as u64;
            for (pos, h, word) in misses.drain(..) {
                ids[pos as usize] = self.vocab.intern(h, &word);
            }
        }
        let doc_base = self.documents;
        self.documents += rows as u64;

        // Phase 3 (parallel by patient): count each complete patient in a reusable
        // thread-local map, then add its distinct terms to the shards. The last patient of
        // the batch stays open: its documents may continue in the next batch.
        let (last_patient, last_start, last_end) = runs.pop().expect("rows > 0");
        let mut open = self.open.take();
        let mut first_continues = false;
        if let Some(o) = open.as_mut() {
            let continues_from = if runs.is_empty() {
                (o.patient == last_patient).then_some((last_start, last_end))
            } else {
                (o.patient == runs[0].0).then_some((runs[0].1, runs[0].2))
            };
            if let Some((start, end)) = continues_from {
                for (row, (ids, _)) in docs.iter().enumerate().take(end).skip(start) {
                    count_doc(ids, (doc_base + row as u64) as u32, &self.cfg, &mut o.local);
                }
                first_continues = !runs.is_empty();
                if runs.is_empty() {
                    self.open = open;
                    return Ok(());
                }
            }
        }
        let complete = if first_continues { &runs[1..] } else { &runs[..] };
        let cfg = &self.cfg;
        let shards = &self.shards;
        let docs = &docs;
        self.install(|| {
            if let Some(o) = open.take() {
                add_patient(shards, o.patient, &o.local, cfg.k);
            }
            complete.par_iter().for_each(|&(patient, start, end)| {
                SCRATCH.with(|scratch| {
                    let scratch = &mut *scratch.borrow_mut();
                    scratch.local.clear();
                    for (row, (ids, _)) in docs.iter().enumerate().take(end).skip(start) {
                        count_doc(ids, (doc_base + row as u64) as u32, cfg, &mut scratch.local);
                    }
                    add_patient_sorted(shards, patient, scratch, cfg.k);
                    if scratch.local.capacity() > 1 << 20 {
                        scratch.local = LocalMap::default();
                        scratch.sorted = Vec::new();
                    }
                });
            });
        });
        for &(patient, _, _) in complete {
            self.finished_patients[patient as usize] = true;
        }
        let mut local = LocalMap::default();
        for (row, (ids, _)) in docs.iter().enumerate().take(last_end).skip(last_start) {
            count_doc(ids, (doc_base + row as u64) as u32, &self.cfg, &mut local);
        }
        self.open = Some(Open { patient: last_patient, local });
        Ok(())
    }

    fn close(&mut self) -> Result<()> {
        if self.done {
            return Err(CoreError::Finished);
        }
        self.done = true;
        if let Some(open) = self.open.take() {
            self.finished_patients[open.patient as usize] = true;
            add_patient(&self.shards, open.patient, &open.local, self.cfg.k);
        }
        Ok(())
    }

    /// Totals over everything added.
    pub fn totals(&self) -> IndexTotals {
        IndexTotals {
            documents: self.documents,
            tokens: self.tokens,
            patients: self.patients.len() as u64,
        }
    }

    /// Every patient id seen, in order of first appearance.
    pub fn patient_ids(&self) -> Vec<String> {
        (0..self.patients.len() as u32).map(|i| self.patients.get(i).to_owned()).collect()
    }

    /// Merge the shards into one list of (key, totals, owners), sorted by (n, term).
    ///
    /// Sorting compares integers, not strings: each word gets its rank in the sorted
    /// vocabulary, and because a normalised word never contains a space (nor any byte below
    /// it), comparing n-grams word by word by rank gives the order of their joined strings.
    fn sorted_entries(&mut self) -> Result<Vec<(Key, Acc, Vec<u32>)>> {
        self.close()?;
        let k = self.cfg.k;
        let shards: Vec<Shard> = std::mem::take(&mut self.shards)
            .into_iter()
            .map(|s| s.into_inner().expect("shard lock"))
            .collect();
        let vocab = &self.vocab;
        let build = || {
            let mut by_string: Vec<u32> = (0..vocab.len() as u32).collect();
            by_string.par_sort_unstable_by(|&a, &b| vocab.get(a).cmp(vocab.get(b)));
            let mut rank = vec![0u32; vocab.len()];
            for (r, &id) in by_string.iter().enumerate() {
                rank[id as usize] = r as u32;
            }
            let sort_key = |key: Key| -> (usize, u128) {
                let n = key_len(key);
                let mut packed: u128 = 0;
                for i in 0..n {
                    let id = ((key >> (32 * i)) as u32) - 1;
                    packed |= (rank[id as usize] as u128) << (32 * (MAX_N - 1 - i));
                }
                (n, packed)
            };
            let mut entries: Vec<(usize, u128, Key, Acc, Vec<u32>)> = shards
                .into_par_iter()
                .flat_map_iter(|shard| {
                    let Shard { map, mut extra_owners } = shard;
                    map.into_iter()
                        .map(|(key, acc)| {
                            let owners = if k <= 2 {
                                acc.owners[..acc.patients.min(k) as usize].to_vec()
                            } else {
                                extra_owners.remove(&key).unwrap_or_default()
                            };
                            let (n, packed) = sort_key(key);
                            (n, packed, key, acc, owners)
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
            entries.par_sort_unstable_by_key(|e| (e.0, e.1));
            entries.into_iter().map(|(_, _, key, acc, owners)| (key, acc, owners)).collect()
        };
        Ok(self.install(build))
    }

    /// The term string of a key: its words joined by single spaces.
    fn term_into(&self, key: Key, out: &mut String) {
        out.clear();
        for i in 0..key_len(key) {
            if i > 0 {
                out.push(' ');
            }
            out.push_str(self.vocab.get(((key >> (32 * i)) as u32) - 1));
        }
    }

    /// Finish and return the rows, sorted by (n, term).
    pub fn finish_rows(&mut self) -> Result<Vec<TermRow>> {
        let k = self.cfg.k;
        let entries = self.sorted_entries()?;
        let mut term = String::new();
        Ok(entries
            .into_iter()
            .map(|(key, acc, owners)| {
                self.term_into(key, &mut term);
                TermRow {
                    term: term.clone(),
                    n: key_len(key) as u8,
                    patients: acc.patients,
                    docs: acc.docs,
                    count: acc.count,
                    indirect: acc.patients < k,
                    patient_ids: owners.iter().map(|&p| self.patients.get(p).to_owned()).collect(),
                }
            })
            .collect())
    }

    /// Finish and return the `terms` table as record batches of at most 2^20 rows.
    pub fn finish(&mut self) -> Result<Vec<RecordBatch>> {
        let k = self.cfg.k;
        let entries = self.sorted_entries()?;
        let mut term = String::new();
        Ok(entries
            .chunks(OUTPUT_ROWS)
            .map(|chunk| {
                let mut terms = StringBuilder::with_capacity(chunk.len(), chunk.len() * 12);
                let mut ids = ListBuilder::new(StringBuilder::new());
                for (key, _, owners) in chunk {
                    self.term_into(*key, &mut term);
                    terms.append_value(&term);
                    for &p in owners {
                        ids.values().append_value(self.patients.get(p));
                    }
                    ids.append(true);
                }
                let columns: Vec<ArrayRef> = vec![
                    Arc::new(terms.finish()),
                    Arc::new(UInt8Array::from_iter_values(
                        chunk.iter().map(|e| key_len(e.0) as u8),
                    )),
                    Arc::new(UInt32Array::from_iter_values(chunk.iter().map(|e| e.1.patients))),
                    Arc::new(UInt32Array::from_iter_values(chunk.iter().map(|e| e.1.docs))),
                    Arc::new(UInt64Array::from_iter_values(chunk.iter().map(|e| e.1.count))),
                    Arc::new(BooleanArray::from(vec![false; chunk.len()])),
                    Arc::new(BooleanArray::from_iter(
                        chunk.iter().map(|e| Some(e.1.patients < k)),
                    )),
                    Arc::new(ids.finish()),
                ];
                RecordBatch::try_new(terms_schema(), columns).expect("terms batch matches schema")
            })
            .collect())
    }
}

#[inline]
fn shard_of(key: Key) -> usize {
    (partition_hash(key) >> 52) as usize % SHARDS
}

/// Add a patient's distinct terms to the shards (for the open patient's owned map).
fn add_patient(shards: &[Mutex<Shard>], patient: u32, local: &LocalMap, cap: u32) {
    let mut scratch = Scratch { local: LocalMap::default(), sorted: Vec::new() };
    scratch.sorted.extend(local.iter().map(|(k, v)| (*k, *v)));
    sort_and_add(shards, patient, &mut scratch.sorted, cap);
}

/// Add the patient counted in `scratch.local` to the shards.
fn add_patient_sorted(shards: &[Mutex<Shard>], patient: u32, scratch: &mut Scratch, cap: u32) {
    scratch.sorted.clear();
    scratch.sorted.extend(scratch.local.iter().map(|(k, v)| (*k, *v)));
    sort_and_add(shards, patient, &mut scratch.sorted, cap);
}

/// Group `entries` by shard (counting sort) and add each group under its shard's lock.
fn sort_and_add(shards: &[Mutex<Shard>], patient: u32, entries: &mut [(Key, LocalAcc)], cap: u32) {
    let mut starts = [0usize; SHARDS + 1];
    for (key, _) in entries.iter() {
        starts[shard_of(*key) + 1] += 1;
    }
    for s in 0..SHARDS {
        starts[s + 1] += starts[s];
    }
    // In-place cycle-leader permutation into shard order (American-flag sort, one pass).
    let mut next = starts;
    for s in 0..SHARDS {
        while next[s] < starts[s + 1] {
            let t = shard_of(entries[next[s]].0);
            if t == s {
                next[s] += 1;
            } else {
                entries.swap(next[s], next[t]);
                next[t] += 1;
            }
        }
    }
    for s in 0..SHARDS {
        if starts[s] == starts[s + 1] {
            continue;
        }
        let mut shard = shards[s].lock().expect("shard lock");
        for (key, l) in &entries[starts[s]..starts[s + 1]] {
            shard.add(*key, l, patient, cap);
        }
    }
}

/// Count the n-grams of one document into a patient-local map.
#[inline]
fn count_doc(ids: &[u32], doc: u32, cfg: &IndexConfig, local: &mut LocalMap) {
    let filter = cfg.modulus > 1;
    let m = cfg.modulus as u64;
    let r = cfg.residue as u64;
    for i in 0..ids.len() {
        let mut key: Key = 0;
        for n in 0..cfg.max_n.min(ids.len() - i) {
            key |= ((ids[i + n] as u128) + 1) << (32 * n);
            if filter && partition_hash(key) % m != r {
                continue;
            }
            let a = local.entry(key).or_insert(LocalAcc { count: 0, docs: 0, last_doc: u32::MAX });
            a.count += 1;
            if a.last_doc != doc {
                a.docs += 1;
                a.last_doc = doc;
            }
        }
    }
}

/// The Arrow schema of the `terms` table as the index writes it.
pub fn terms_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("term", DataType::Utf8, false),
        Field::new("n", DataType::UInt8, false),
        Field::new("patients", DataType::UInt32, false),
        Field::new("docs", DataType::UInt32, false),
        Field::new("count", DataType::UInt64, false),
        Field::new("direct", DataType::Boolean, false),
        Field::new("indirect", DataType::Boolean, false),
        Field::new(
            "patient_ids",
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            false,
        ),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::StringArray;
    use std::collections::{BTreeMap, BTreeSet};

    fn arr(v: &[&str]) -> ArrayRef {
        Arc::new(StringArray::from_iter_values(v.iter().copied()))
    }

    /// A plain reference: per (n, term) -> (patients, docs, count).
    fn reference(
        docs: &[(&str, &str)],
        max_n: usize,
    ) -> BTreeMap<(u8, String), (u32, u32, u64)> {
        let norm = Normalizer::default();
        let mut pats: BTreeMap<(u8, String), BTreeSet<String>> = BTreeMap::new();
        let mut out: BTreeMap<(u8, String), (u32, u32, u64)> = BTreeMap::new();
        for (p, text) in docs {
            let mut words = Vec::new();
            for_each_word(text, |s, e| words.push(norm.normalize(&text[s..e])));
            let mut seen = BTreeSet::new();
            for i in 0..words.len() {
                for n in 1..=max_n.min(words.len() - i) {
                    let key = (n as u8, words[i..i + n].join(" "));
                    let e = out.entry(key.clone()).or_default();
                    e.2 += 1;
                    if seen.insert(key.clone()) {
                        e.1 += 1;
                    }
                    pats.entry(key).or_default().insert(p.to_string());
                }
            }
        }
        for (key, e) in out.iter_mut() {
            e.0 = pats[key].len() as u32;
        }
        out
    }

    fn run(docs: &[(&str, &str)], cfg: IndexConfig, batch: usize) -> Vec<TermRow> {
        let mut b = IndexBuilder::new(cfg).unwrap();
        for chunk in docs.chunks(batch) {
            let p: Vec<&str> = chunk.iter().map(|d| d.0).collect();
            let t: Vec<&str> = chunk.iter().map(|d| d.1).collect();
            b.add(&arr(&p), &arr(&t)).unwrap();
        }
        b.finish_rows().unwrap()
    }

    const DOCS: &[(&str, &str)] = &[
        ("p1", "Pt Dupont c/o chest pain. Dupont, again"),
        ("p1", "chest pain resolved; Zoë visited"),
        ("p2", "chest PAIN at rest, dupont"),
        ("p2", ""),
        ("p3", "no chest pain, NSR, zoë!"),
    ];

    #[test]
    fn equals_reference_for_any_batching_threads_and_partitions() {
        for max_n in 1..=3 {
            let want = reference(DOCS, max_n);
            for batch in 1..=5 {
                for threads in [1, 3] {
                    let mut got_all = Vec::new();
                    for modulus in [1u32, 3] {
                        got_all.clear();
                        for residue in 0..modulus {
                            let cfg = IndexConfig { max_n, modulus, residue, threads, ..Default::default() };
                            got_all.extend(run(DOCS, cfg, batch));
                        }
                        if modulus == 1 {
                            let order: Vec<_> = got_all.iter().map(|r| (r.n, r.term.clone())).collect();
                            let mut sorted = order.clone();
                            sorted.sort();
                            assert_eq!(order, sorted, "rows sorted by (n, term)");
                        }
                        let got: BTreeMap<_, _> = got_all
                            .iter()
                            .map(|r| ((r.n, r.term.clone()), (r.patients, r.docs, r.count)))
                            .collect();
                        assert_eq!(got.len(), got_all.len());
                        assert_eq!(got, want, "n={max_n} batch={batch} threads={threads} m={modulus}");
                    }
                }
            }
        }
    }

    #[test]
    fn indirect_flags_and_owners() {
        let rows = run(DOCS, IndexConfig::default(), 2);
        let get = |t: &str| rows.iter().find(|r| r.term == t).unwrap().clone();
        let dupont = get("dupont");
        assert_eq!((dupont.patients, dupont.docs, dupont.count, dupont.indirect), (2, 2, 3, false));
        assert_eq!(dupont.patient_ids, ["p1", "p2"]);
        let nsr = get("nsr");
        assert!(nsr.indirect);
        assert_eq!(nsr.patient_ids, ["p3"]);
        let zoe = get("zoë");
        assert_eq!((zoe.patients, zoe.indirect), (2, false));
        let cfg = IndexConfig { k: 4, ..Default::default() };
        let rows = run(DOCS, cfg, 5);
        let chest = rows.iter().find(|r| r.term == "chest").unwrap();
        assert_eq!(chest.patient_ids, ["p1", "p2", "p3"]);
        assert!(chest.indirect);
    }

    #[test]
    fn ungrouped_patients_are_an_error() {
        let mut b = IndexBuilder::new(IndexConfig::default()).unwrap();
        b.add(&arr(&["a", "b"]), &arr(&["x", "y"])).unwrap();
        let err = b.add(&arr(&["b", "a"]), &arr(&["x", "y"])).unwrap_err();
        assert_eq!(err, CoreError::NotGrouped { batch: 1, row: 1 });
    }

    #[test]
    fn bad_arguments() {
        assert!(IndexBuilder::new(IndexConfig { max_n: 5, ..Default::default() }).is_err());
        assert!(IndexBuilder::new(IndexConfig { k: 0, ..Default::default() }).is_err());
        let cfg = IndexConfig { modulus: 2, residue: 2, ..Default::default() };
        assert!(IndexBuilder::new(cfg).is_err());
        let mut b = IndexBuilder::new(IndexConfig::default()).unwrap();
        let nulls: ArrayRef = Arc::new(StringArray::from(vec![Some("a"), None]));
        let err = b.add(&nulls, &arr(&["x", "y"])).unwrap_err();
        assert_eq!(err, CoreError::Null { what: "patient_id", row: 1 });
    }

    #[test]
    fn key_len_counts_words() {
        assert_eq!(key_len(1), 1);
        assert_eq!(key_len(1 | (5 << 32)), 2);
        assert_eq!(key_len(1 | (5 << 32) | (7u128 << 64) | (9u128 << 96)), 4);
    }
}

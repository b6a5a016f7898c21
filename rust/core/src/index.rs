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
use arrow_array::{
    ArrayRef, BooleanArray, RecordBatch, StringArray, UInt32Array, UInt64Array, UInt8Array,
};
use arrow_schema::{DataType, Field, Schema};
use rayon::prelude::*;
use rustc_hash::FxHashMap;
use std::sync::Arc;

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

/// Per-term totals.
#[derive(Debug, Default, Clone, Copy)]
struct Acc {
    count: u64,
    docs: u32,
    patients: u32,
    owners: [u32; 2],
}

/// Per-term totals within one patient.
#[derive(Debug, Clone, Copy)]
struct LocalAcc {
    count: u64,
    docs: u32,
    last_doc: u32,
}

/// The terms of one patient's contiguous documents.
struct Run {
    patient: u32,
    local: FxHashMap<Key, LocalAcc>,
}

impl Run {
    fn absorb(&mut self, other: Run) {
        for (key, o) in other.local {
            self.local
                .entry(key)
                .and_modify(|a| {
                    a.count += o.count;
                    a.docs += o.docs;
                })
                .or_insert(o);
        }
    }
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
    /// Up to `k` patient ids that use the term, in order of first use.
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
    shards: Vec<FxHashMap<Key, Acc>>,
    extra_owners: Vec<FxHashMap<Key, Vec<u32>>>,
    carry: Option<Run>,
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
            shards: (0..SHARDS).map(|_| FxHashMap::default()).collect(),
            extra_owners: (0..SHARDS).map(|_| FxHashMap::default()).collect(),
            carry: None,
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
        self.vocab.memory_bytes()
            + self.patients.memory_bytes()
            + self.shards.iter().map(|m| m.capacity() * entry).sum::<usize>()
            + self.carry.as_ref().map_or(0, |r| r.local.capacity() * local)
    }

    /// Distinct terms counted so far (excluding the open patient's new terms).
    pub fn num_terms(&self) -> usize {
        self.shards.iter().map(|m| m.len()).sum()
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
        let mut current = self.carry.as_ref().map(|r| r.patient);
        for row in 0..rows {
            let pid = pids.get(row).ok_or(CoreError::Null { what: "patient_id", row })?;
            if texts.get(row).is_none() {
                return Err(CoreError::Null { what: "text", row });
            }
            let p = self.patients.intern(hash_str(pid), pid);
            if p as usize == self.finished_patients.len() {
                self.finished_patients.push(false);
            }
            if Some(p) != current {
                if let Some(c) = current {
                    self.finished_patients[c as usize] = true;
                }
                if self.finished_patients[p as usize] {
                    self.done = true;
                    return Err(CoreError::NotGrouped { batch: batch_no, row });
                }
                current = Some(p);
                runs.push((p, row, row + 1));
            } else if let Some(last) = runs.last_mut() {
                last.2 = row + 1;
            } else {
                // Continues the patient carried over from the previous batch.
                runs.push((p, row, row + 1));
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
                    let mut ids = Vec::with_capacity(text.len() / 5 + 1);
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

        // Phase 3 (parallel by patient): patient-local distinct terms.
        let cfg = &self.cfg;
        let docs = &docs;
        let mut new_runs: Vec<Run> = self.install(|| {
            runs.par_iter()
                .map(|&(patient, start, end)| {
                    let mut local: FxHashMap<Key, LocalAcc> = FxHashMap::default();
                    for (row, (ids, _)) in docs.iter().enumerate().take(end).skip(start) {
                        let doc = (doc_base + row as u64) as u32;
                        count_doc(ids, doc, cfg, &mut local);
                    }
                    Run { patient, local }
                })
                .collect()
        });

        // The previous batch's last patient either continues here or is complete.
        let mut complete: Vec<Run> = Vec::new();
        if let Some(carry) = self.carry.take() {
            if new_runs[0].patient == carry.patient {
                let first = std::mem::replace(
                    &mut new_runs[0],
                    Run { patient: carry.patient, local: FxHashMap::default() },
                );
                let (mut big, small) =
                    if carry.local.len() >= first.local.len() { (carry, first) } else { (first, carry) };
                big.absorb(small);
                new_runs[0] = big;
            } else {
                complete.push(carry);
            }
        }
        self.carry = new_runs.pop();
        complete.extend(new_runs);
        self.flush(complete);
        Ok(())
    }

    /// Phase 4 (parallel by shard): add complete patients' terms to the global maps.
    fn flush(&mut self, runs: Vec<Run>) {
        if runs.is_empty() {
            return;
        }
        let cap = self.cfg.k;
        let pool = self.pool.clone();
        let work = || {
            let bucketed: Vec<(u32, Vec<Vec<(Key, LocalAcc)>>)> = runs
                .into_par_iter()
                .map(|run| {
                    let mut buckets: Vec<Vec<(Key, LocalAcc)>> = vec![Vec::new(); SHARDS];
                    for (key, acc) in run.local {
                        buckets[shard_of(key)].push((key, acc));
                    }
                    (run.patient, buckets)
                })
                .collect();
            self.shards
                .par_iter_mut()
                .zip(self.extra_owners.par_iter_mut())
                .enumerate()
                .for_each(|(s, (map, extra))| {
                    for (patient, buckets) in &bucketed {
                        for &(key, l) in &buckets[s] {
                            let acc = map.entry(key).or_default();
                            acc.count += l.count;
                            acc.docs += l.docs;
                            let before = acc.patients;
                            acc.patients += 1;
                            if before < cap {
                                if before < 2 {
                                    acc.owners[before as usize] = *patient;
                                } else {
                                    extra.entry(key).or_default().push(*patient);
                                }
                            }
                        }
                    }
                });
        };
        match pool {
            Some(p) => p.install(work),
            None => work(),
        }
    }

    fn close(&mut self) -> Result<()> {
        if self.done {
            return Err(CoreError::Finished);
        }
        self.done = true;
        if let Some(carry) = self.carry.take() {
            self.finished_patients[carry.patient as usize] = true;
            self.flush(vec![carry]);
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

    /// Finish and return the rows, sorted by (n, term).
    pub fn finish_rows(&mut self) -> Result<Vec<TermRow>> {
        self.close()?;
        let k = self.cfg.k;
        let shards = std::mem::take(&mut self.shards);
        let extra = std::mem::take(&mut self.extra_owners);
        let vocab = &self.vocab;
        let patients = &self.patients;
        let build = || {
            let mut rows: Vec<TermRow> = shards
                .into_par_iter()
                .zip(extra.into_par_iter())
                .flat_map_iter(|(map, extra)| {
                    map.into_iter()
                        .map(|(key, acc)| {
                            let n = key_len(key);
                            let mut term = String::new();
                            for i in 0..n {
                                if i > 0 {
                                    term.push(' ');
                                }
                                term.push_str(vocab.get(((key >> (32 * i)) as u32) - 1));
                            }
                            let kept = acc.patients.min(k) as usize;
                            let mut patient_ids: Vec<String> = acc.owners[..kept.min(2)]
                                .iter()
                                .map(|&p| patients.get(p).to_owned())
                                .collect();
                            if kept > 2 {
                                if let Some(more) = extra.get(&key) {
                                    patient_ids
                                        .extend(more.iter().map(|&p| patients.get(p).to_owned()));
                                }
                            }
                            TermRow {
                                term,
                                n: n as u8,
                                patients: acc.patients,
                                docs: acc.docs,
                                count: acc.count,
                                indirect: acc.patients < k,
                                patient_ids,
                            }
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
            rows.par_sort_unstable_by(|a, b| (a.n, &a.term).cmp(&(b.n, &b.term)));
            rows
        };
        Ok(self.install(build))
    }

    /// Finish and return the `terms` table as record batches of at most 2^20 rows.
    pub fn finish(&mut self) -> Result<Vec<RecordBatch>> {
        let rows = self.finish_rows()?;
        Ok(rows.chunks(OUTPUT_ROWS).map(terms_batch).collect())
    }
}

#[inline]
fn shard_of(key: Key) -> usize {
    (partition_hash(key) >> 52) as usize % SHARDS
}

/// Count the n-grams of one document into a patient-local map.
#[inline]
fn count_doc(ids: &[u32], doc: u32, cfg: &IndexConfig, local: &mut FxHashMap<Key, LocalAcc>) {
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
            local
                .entry(key)
                .and_modify(|a| {
                    a.count += 1;
                    if a.last_doc != doc {
                        a.docs += 1;
                        a.last_doc = doc;
                    }
                })
                .or_insert(LocalAcc { count: 1, docs: 1, last_doc: doc });
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

fn terms_batch(rows: &[TermRow]) -> RecordBatch {
    let term = StringArray::from_iter_values(rows.iter().map(|r| r.term.as_str()));
    let n = UInt8Array::from_iter_values(rows.iter().map(|r| r.n));
    let patients = UInt32Array::from_iter_values(rows.iter().map(|r| r.patients));
    let docs = UInt32Array::from_iter_values(rows.iter().map(|r| r.docs));
    let count = UInt64Array::from_iter_values(rows.iter().map(|r| r.count));
    let direct = BooleanArray::from(vec![false; rows.len()]);
    let indirect = BooleanArray::from_iter(rows.iter().map(|r| Some(r.indirect)));
    let mut ids = ListBuilder::new(StringBuilder::new());
    for r in rows {
        for p in &r.patient_ids {
            ids.values().append_value(p);
        }
        ids.append(true);
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(term),
        Arc::new(n),
        Arc::new(patients),
        Arc::new(docs),
        Arc::new(count),
        Arc::new(direct),
        Arc::new(indirect),
        Arc::new(ids.finish()),
    ];
    RecordBatch::try_new(terms_schema(), columns).expect("terms batch matches its schema")
}

#[cfg(test)]
mod tests {
    use super::*;
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

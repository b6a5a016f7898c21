//! The patient x term index.
//!
//! For every term (a normalised word n-gram, n = 1..=N) the index counts the distinct
//! patients that use it, the documents that contain it and its occurrences. A term is an
//! indirect identifier when fewer than `k` patients use it.
//!
//! # How it stays exact, fast and bounded
//! * Input is a stream of record batches whose rows are **grouped by patient** (all documents of
//!   a patient contiguous; a group may straddle batches). Each term's entry sees its
//!   occurrences in input order, so it counts a document or a patient when it first sees it
//!   (it remembers the last ones it saw): the distinct-patient count is exact without sets. A
//!   patient that reappears after other patients is an error ([`CoreError::NotGrouped`]); the
//!   Python layer sorts such input.
//! * Words are interned to dense `u32` ids (exact, string-compared); an n-gram key packs up to
//!   four ids into a `u128`, so keys are exact too (no hashing of terms into sketches).
//! * Work is parallel per batch: documents are tokenised in parallel, then every worker scans
//!   the batch and counts the n-grams whose first word it owns (words are split among
//!   workers by id) into its own hash shards, single words into arrays indexed by id. Workers
//!   hold disjoint terms, so nothing is merged, and results do not depend on threads or
//!   batching.
//! * A partition `(modulus, residue)` keeps only the terms whose key hashes to `residue`
//!   modulo `modulus`: several passes with residues `0..modulus` cover every term once, each
//!   pass holding a `1/modulus` share of the terms in memory.
//! * Each term keeps up to `k` patient ids: the `k` smallest by [`id_hash`] of the id (ties by
//!   the id), listed in that order. They depend on neither the order of the documents nor the
//!   sharding, and the ids kept by partial indexes merge exactly: the `k` smallest of the
//!   union of their lists are the `k` smallest of the whole.

use crate::error::{CoreError, Result};
use crate::hash::{id_hash, key_hash, partition_hash, Key};
use crate::normalize::{for_each_term, Normalizer};
use crate::table::{Entry, Table};
use crate::text::StrCol;
use crate::vocab::Vocab;
use crate::MAX_N;
use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::{ArrayRef, BooleanArray, RecordBatch, UInt32Array, UInt64Array, UInt8Array};
use arrow_schema::{DataType, Field, Schema};
use rayon::prelude::*;
use rustc_hash::FxHashMap;
use std::sync::Arc;

const SHARDS: usize = 64;
const MISS: u32 = u32::MAX;
/// Below this many words, the vocabulary is warmed up on small chunks of a batch.
const COLD_VOCAB: usize = 1 << 14;
/// Rows per output record batch.
const OUTPUT_ROWS: usize = 1 << 18;

/// Options of an index run.
#[derive(Debug, Clone)]
pub struct IndexConfig {
    /// Largest n-gram length, 1..=4.
    pub max_n: usize,
    /// A term is indirect when fewer than `k` patients use it; up to `k` patient ids are kept
    /// per term (the `k` smallest by [`id_hash`]) so that partial indexes merge exactly for
    /// that test.
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

/// The number of words in a key.
#[inline]
pub fn key_len(key: Key) -> usize {
    let mut n = 0;
    while n < MAX_N && (key >> (32 * n)) as u32 != 0 {
        n += 1;
    }
    n
}

/// The owners of the terms of a shard between the smallest and the largest kept (the 2nd to
/// the (k-1)-th, in order), when `k > 2`; [`Entry::owners`] holds the two ends.
type ExtraOwners = FxHashMap<Key, Vec<u32>>;

/// The order in which terms keep patients: by [`id_hash`] of the id, ties (never seen in
/// practice) by the id itself. A strict total order on distinct patients.
#[derive(Clone, Copy)]
struct PatientOrder<'a> {
    hashes: &'a [u64],
    names: &'a Vocab,
}

impl PatientOrder<'_> {
    /// Whether patient `a` comes before patient `b`.
    #[inline(always)]
    fn less(&self, a: u32, b: u32) -> bool {
        let (ha, hb) = (self.hashes[a as usize], self.hashes[b as usize]);
        ha < hb || (ha == hb && self.names.get(a) < self.names.get(b))
    }
}

/// Add a patient new to a term to the term's kept owners: the `k` smallest patients so far in
/// [`PatientOrder`]. With `m = min(e.patients, k)` kept (before this one) in ascending order
/// `L`, `e.owners[0]` is `L[0]`, `e.owners[1]` is `L[m - 1]` (when `m >= 2`) and `extra[key]`
/// the ones between. Once `k` are kept, a patient whose hash is above the largest's is
/// dropped at once, without touching `extra`: the common case, kept inline.
#[inline(always)]
fn keep_owner(
    e: &mut Entry,
    extra: &mut ExtraOwners,
    key: Key,
    patient: u32,
    k: u32,
    order: &PatientOrder<'_>,
) {
    if e.patients >= k {
        let largest = e.owners[usize::from(k >= 2)];
        if order.hashes[patient as usize] > order.hashes[largest as usize] {
            return;
        }
    }
    insert_owner(e, extra, key, patient, k, order);
}

/// [`keep_owner`] past its fast check.
#[inline(never)]
fn insert_owner(
    e: &mut Entry,
    extra: &mut ExtraOwners,
    key: Key,
    patient: u32,
    k: u32,
    order: &PatientOrder<'_>,
) {
    let m = e.patients.min(k);
    let full = m == k;
    match m {
        0 => e.owners[0] = patient,
        1 if full => {
            if order.less(patient, e.owners[0]) {
                e.owners[0] = patient;
            }
        }
        1 => {
            if order.less(patient, e.owners[0]) {
                e.owners[1] = e.owners[0];
                e.owners[0] = patient;
            } else {
                e.owners[1] = patient;
            }
        }
        _ => {
            let before_last = order.less(patient, e.owners[1]);
            if full && !before_last {
                return;
            }
            if k == 2 {
                // Full, and the patient comes before the largest: the largest goes.
                if order.less(patient, e.owners[0]) {
                    e.owners[1] = e.owners[0];
                    e.owners[0] = patient;
                } else {
                    e.owners[1] = patient;
                }
                return;
            }
            let middle = extra
                .entry(key)
                .or_insert_with(|| Vec::with_capacity(k as usize - 2));
            if !before_last {
                // Room left, and the patient is the largest.
                middle.push(e.owners[1]);
                e.owners[1] = patient;
                return;
            }
            if full {
                // The largest goes: the patient or the largest of the others takes its place.
                let last = *middle.last().expect("k > 2 kept");
                if order.less(last, patient) {
                    e.owners[1] = patient;
                    return;
                }
                e.owners[1] = last;
                middle.pop();
            }
            // The patient goes in order among `owners[0]` and `middle`.
            if order.less(patient, e.owners[0]) {
                middle.insert(0, e.owners[0]);
                e.owners[0] = patient;
            } else {
                let at = middle.partition_point(|&q| order.less(q, patient));
                middle.insert(at, patient);
            }
        }
    }
}

/// Count one occurrence of `key` in document `doc` of patient `patient` into its entry.
/// Documents and patients are counted on first sight, which is exact because the input is
/// grouped by patient and each entry sees its occurrences in input order.
#[inline(always)]
fn count_entry(
    e: &mut Entry,
    extra: &mut ExtraOwners,
    key: Key,
    (doc, patient): (u32, u32),
    k: u32,
    order: &PatientOrder<'_>,
) {
    e.count += 1;
    let doc_tag = doc % u32::MAX + 1;
    if e.last_doc != doc_tag {
        e.last_doc = doc_tag;
        e.docs += 1;
        let patient_tag = patient + 1;
        if e.last_patient != patient_tag {
            e.last_patient = patient_tag;
            keep_owner(e, extra, key, patient, k, order);
            e.patients += 1;
        }
    }
}

/// One of the hash shards of the term table.
#[derive(Default)]
struct Shard {
    table: Table,
    extra_owners: ExtraOwners,
}

impl Shard {
    #[inline(always)]
    fn count(&mut self, key: Key, hash: u64, at: (u32, u32), k: u32, order: &PatientOrder<'_>) {
        let e = self.table.entry(key, hash);
        count_entry(e, &mut self.extra_owners, key, at, k, order);
    }
}

/// Words fall into `CLASSES` classes by id (`id % CLASSES`); each worker owns some classes,
/// and counts exactly the n-grams whose first word is in a class it owns. Workers so count
/// disjoint sets of terms, each term's occurrences in input order, and nothing is merged.
const CLASSES: usize = 256;

/// Single words counted in arrays indexed by word id (one per class the worker owns; used
/// when every term is kept, i.e. without partitions): no hashing and no probing for the most
/// frequent updates.
#[derive(Default)]
struct Dense {
    /// `classes[c][id / CLASSES]` counts the word `id` of class `c = id % CLASSES`.
    classes: Vec<Vec<Entry>>,
    extra_owners: ExtraOwners,
}

impl Dense {
    #[inline]
    fn get(&self, id: u32) -> Option<&Entry> {
        let id = id as usize;
        self.classes.get(id % CLASSES)?.get(id / CLASSES)
    }
}

/// What one worker counts into: its hash shards and its single-word arrays.
struct Worker {
    /// Which classes of first words this worker counts.
    owns: [bool; CLASSES],
    shards: Vec<Shard>,
    dense: Dense,
}

impl Worker {
    /// Worker `w` of `workers`: it owns the classes `c` with `c % workers == w`.
    fn new(w: usize, workers: usize) -> Self {
        let mut owns = [false; CLASSES];
        for (c, o) in owns.iter_mut().enumerate() {
            *o = c % workers == w;
        }
        Self {
            owns,
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            dense: Dense {
                classes: vec![Vec::new(); CLASSES],
                extra_owners: ExtraOwners::default(),
            },
        }
    }

    fn memory_bytes(&self, k: u32) -> usize {
        let extra = |m: &ExtraOwners| {
            m.capacity() * (std::mem::size_of::<(Key, Vec<u32>)>() + 1) + m.len() * k as usize * 4
        };
        self.dense
            .classes
            .iter()
            .map(|c| c.capacity() * std::mem::size_of::<Entry>())
            .sum::<usize>()
            + extra(&self.dense.extra_owners)
            + self
                .shards
                .iter()
                .map(|s| s.table.memory_bytes() + extra(&s.extra_owners))
                .sum::<usize>()
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
    /// Up to `k` ids of patients using the term: the smallest by [`id_hash`] (ties by the
    /// id), in that order.
    pub patient_ids: Vec<String>,
}

/// Totals of a finished index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexTotals {
    pub documents: u64,
    pub tokens: u64,
    pub patients: u64,
}

/// How many key updates ahead the counting loop prefetches.
const AHEAD: usize = 8;

/// Builds the patient x term index from batches of (patient id, text).
pub struct IndexBuilder {
    cfg: IndexConfig,
    vocab: Vocab,
    patients: Vocab,
    /// [`id_hash`] of each patient id, by patient number.
    patient_hashes: Vec<u64>,
    finished_patients: Vec<bool>,
    last_patient: Option<u32>,
    /// Per worker, its shards and single-word arrays: workers count disjoint sets of terms.
    workers: Vec<Worker>,
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
            patient_hashes: Vec::new(),
            finished_patients: Vec::new(),
            last_patient: None,
            workers: Vec::new(),
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

    /// Approximate heap bytes held (term tables and vocabularies).
    pub fn memory_bytes(&self) -> usize {
        let k = self.cfg.k;
        let shards: usize = self.workers.iter().map(|w| w.memory_bytes(k)).sum();
        self.vocab.memory_bytes() + self.patients.memory_bytes() + shards
    }

    /// Terms counted so far (single words counted densely are bounded by the vocabulary).
    fn terms_len(&self) -> usize {
        let dense = if dense_unigrams(&self.cfg) {
            self.vocab.len()
        } else {
            0
        };
        let hashed: usize = self
            .workers
            .iter()
            .flat_map(|w| w.shards.iter())
            .map(|s| s.table.len())
            .sum();
        dense + hashed
    }

    /// Approximate heap bytes that finishing the index would add to [`Self::memory_bytes`]:
    /// the vocabulary's sort ranks, the terms' sort order and the output batches (terms,
    /// counts and up to `k` patient ids per term).
    pub fn finish_bytes(&self) -> usize {
        let terms = self.terms_len();
        let words = self.vocab.len();
        let avg = |bytes: usize, n: usize| if n == 0 { 0 } else { bytes.div_ceil(n) };
        let word = avg(self.vocab.text_bytes(), words) + 1;
        let patient = avg(self.patients.text_bytes(), self.patients.len()) + 4;
        let sort = words * 8 + terms * (std::mem::size_of::<(u8, u128, u64)>() + 8);
        // Per output row: the term (n words), its offset, n, patients, docs, count, in_span,
        // the flags, the patient-id list offset and the ids.
        let row =
            self.cfg.max_n * word + 4 + 1 + 4 + 4 + 8 + 8 + 1 + 4 + self.cfg.k as usize * patient;
        sort + terms * row
    }

    /// The part of [`Self::peak_bytes`] that every partition pass holds whole: the word and
    /// patient vocabularies and the words' sort ranks (partitions split only the terms).
    pub fn fixed_bytes(&self) -> usize {
        self.vocab.memory_bytes() + self.patients.memory_bytes() + self.vocab.len() * 8
    }

    /// Approximate heap bytes at the peak of the index's life: what it holds now and what
    /// finishing it adds ([`Self::memory_bytes`] + [`Self::finish_bytes`]).
    pub fn peak_bytes(&self) -> usize {
        self.memory_bytes() + self.finish_bytes()
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
        // Patient of each row, checking that each patient's rows are contiguous.
        let mut row_patient: Vec<u32> = Vec::with_capacity(rows);
        for row in 0..rows {
            let pid = pids.get(row).ok_or(CoreError::Null {
                what: "patient_id",
                row,
            })?;
            if texts.get(row).is_none() {
                return Err(CoreError::Null { what: "text", row });
            }
            let p = self.patients.intern_str(pid);
            if p as usize == self.finished_patients.len() {
                self.finished_patients.push(false);
                self.patient_hashes.push(id_hash(pid));
            }
            if Some(p) != self.last_patient {
                if let Some(c) = self.last_patient {
                    self.finished_patients[c as usize] = true;
                }
                if self.finished_patients[p as usize] {
                    self.done = true;
                    return Err(CoreError::NotGrouped {
                        batch: batch_no,
                        row,
                    });
                }
                self.last_patient = Some(p);
            }
            row_patient.push(p);
        }
        if rows == 0 {
            return Ok(());
        }

        // Phases 1-2 by chunks of rows: tokenise in parallel against the vocabulary as it is
        // (misses kept aside), then intern the misses in row order, so ids follow first
        // occurrence. While the vocabulary is cold, chunks start small so that it warms up on
        // few documents.
        // Word ids of the whole batch go back to back into one vector.
        let mut ids: Vec<u32> = Vec::new();
        let mut ends: Vec<usize> = Vec::with_capacity(rows);
        let mut chunk_start = 0;
        let mut chunk_len = if self.vocab.len() < COLD_VOCAB {
            64
        } else {
            rows
        };
        while chunk_start < rows {
            let chunk_end = (chunk_start + chunk_len).min(rows);
            for mut piece in self.tokenize_rows(texts, chunk_start..chunk_end) {
                for &(pos, start, end) in &piece.misses {
                    piece.ids[pos as usize] = self
                        .vocab
                        .intern_str(&piece.arena[start as usize..end as usize]);
                }
                let base = ids.len();
                ids.extend_from_slice(&piece.ids);
                ends.extend(piece.ends.iter().map(|&e| base + e as usize));
            }
            chunk_start = chunk_end;
            chunk_len *= 4;
        }
        self.tokens += ids.len() as u64;
        let doc_base = self.documents;
        self.documents += rows as u64;

        // Phase 3: every worker counts the n-grams of the batch whose first word it owns.
        // A patient's documents may continue in the next batch: each term's entry sees its
        // occurrences in input order whatever the batches, which is all counting needs.
        let mut units: Vec<Unit<'_>> = Vec::with_capacity(rows);
        let mut start = 0;
        for (row, &end) in ends.iter().enumerate() {
            units.push((
                &ids[start..end],
                (doc_base + row as u64) as u32,
                row_patient[row],
            ));
            start = end;
        }
        let order = PatientOrder {
            hashes: &self.patient_hashes,
            names: &self.patients,
        };
        count_units_parallel(
            &mut self.workers,
            self.pool.as_deref(),
            &self.cfg,
            &units,
            self.vocab.len(),
            &order,
        );
        Ok(())
    }

    /// Words of `rows` as vocabulary ids (`MISS` where unknown), in pieces of consecutive
    /// rows tokenised in parallel.
    fn tokenize_rows(&self, texts: StrCol<'_>, rows: std::ops::Range<usize>) -> Vec<Piece> {
        let norm = self.cfg.normalizer;
        let vocab = &self.vocab;
        self.install(|| {
            let per_piece = rows.len().div_ceil(rayon::current_num_threads() * 4).max(1);
            let starts: Vec<usize> = rows.clone().step_by(per_piece).collect();
            starts
                .into_par_iter()
                .map(|start| {
                    let end = (start + per_piece).min(rows.end);
                    let mut piece = Piece::default();
                    let mut buf = String::new();
                    for row in start..end {
                        let text = texts.get(row).unwrap_or("");
                        for_each_term(text, &norm, &mut buf, |term| match vocab.find(term) {
                            Some(id) => piece.ids.push(id),
                            None => {
                                let a = piece.arena.len() as u32;
                                piece.arena.push_str(term.text);
                                let b = piece.arena.len() as u32;
                                piece.misses.push((piece.ids.len() as u32, a, b));
                                piece.ids.push(MISS);
                            }
                        });
                        piece.ends.push(piece.ids.len() as u32);
                    }
                    piece
                })
                .collect()
        })
    }

    fn close(&mut self) -> Result<()> {
        if self.done {
            return Err(CoreError::Finished);
        }
        self.done = true;
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
        (0..self.patients.len() as u32)
            .map(|i| self.patients.get(i).to_owned())
            .collect()
    }

    /// Gather the workers' counts and order the rows by (n, term).
    ///
    /// Sorting compares integers, not strings: each word gets its rank in the sorted
    /// vocabulary, and because a normalised word never contains a space (nor any byte below
    /// it), comparing n-grams word by word by rank gives the order of their joined strings.
    fn counted(&mut self) -> Result<Counted> {
        self.close()?;
        let mut workers = std::mem::take(&mut self.workers);
        let vocab = &self.vocab;
        let build = move || {
            let mut by_string: Vec<u32> = (0..vocab.len() as u32).collect();
            by_string.par_sort_unstable_by(|&a, &b| vocab.get(a).cmp(vocab.get(b)));
            let mut rank = vec![0u32; vocab.len()];
            for (r, &id) in by_string.iter().enumerate() {
                rank[id as usize] = r as u32;
            }
            // (n, ranks packed first word highest) orders like (n, term).
            let sort_key = |key: Key| -> (u8, u128) {
                let n = key_len(key);
                let mut packed: u128 = 0;
                for i in 0..n {
                    let id = ((key >> (32 * i)) as u32) - 1;
                    packed |= (rank[id as usize] as u128) << (32 * (MAX_N - 1 - i));
                }
                (n as u8, packed)
            };
            let owner: Vec<u32> = (0..CLASSES)
                .map(|c| workers.iter().position(|w| w.owns[c]).unwrap_or(0) as u32)
                .collect();
            // Single words counted densely come first (n = 1), in vocabulary order.
            let mut rows: Vec<u64> = by_string
                .iter()
                .filter(|&&id| {
                    workers
                        .get(owner[id as usize % CLASSES] as usize)
                        .and_then(|w| w.dense.get(id))
                        .is_some_and(|e| e.count > 0)
                })
                .map(|&id| id as u64 | WORD_ROW)
                .collect();
            // Every table's terms with their sort keys, filled in parallel into one vector.
            let tables: Vec<(usize, usize)> = (0..workers.len())
                .flat_map(|w| (0..SHARDS).map(move |s| (w, s)))
                .collect();
            let total: usize = tables
                .iter()
                .map(|&(w, s)| workers[w].shards[s].table.len())
                .sum();
            let mut order: Vec<(u8, u128, u64)> = vec![(0, 0, 0); total];
            let mut parts: Vec<&mut [(u8, u128, u64)]> = Vec::with_capacity(tables.len());
            let mut rest = order.as_mut_slice();
            for &(w, s) in &tables {
                let (part, tail) = rest.split_at_mut(workers[w].shards[s].table.len());
                parts.push(part);
                rest = tail;
            }
            parts
                .into_par_iter()
                .zip(tables.par_iter())
                .for_each(|(part, &(w, s))| {
                    let table = &workers[w].shards[s].table;
                    for (out, (slot, key)) in part.iter_mut().zip(table.occupied()) {
                        let (n, packed) = sort_key(key);
                        *out = (n, packed, (w as u64) << 38 | (s as u64) << 32 | slot as u64);
                    }
                });
            order.par_sort_unstable();
            rows.extend(order.iter().map(|&(_, _, loc)| loc));
            let mut extra = ExtraOwners::default();
            for w in &mut workers {
                extra.extend(std::mem::take(&mut w.dense.extra_owners));
                for shard in &mut w.shards {
                    extra.extend(std::mem::take(&mut shard.extra_owners));
                }
            }
            Counted {
                workers,
                owner,
                extra,
                rows,
            }
        };
        Ok(self.install(build))
    }

    /// The owners of an entry: up to `k` patient indices, the smallest in [`PatientOrder`],
    /// in that order (see [`keep_owner`]).
    fn owners<'a>(
        &self,
        key: Key,
        e: &'a Entry,
        extra: &'a ExtraOwners,
    ) -> impl Iterator<Item = u32> + 'a {
        let m = e.patients.min(self.cfg.k) as usize;
        let middle = if m > 2 {
            extra.get(&key).map_or(&[][..], |v| v.as_slice())
        } else {
            &[]
        };
        let last = if m >= 2 { &e.owners[1..] } else { &[] };
        e.owners[..m.min(1)]
            .iter()
            .chain(middle.iter())
            .chain(last.iter())
            .copied()
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
        let counted = self.counted()?;
        let mut term = String::new();
        Ok(counted
            .rows
            .iter()
            .map(|&row| {
                let (key, e) = counted.get(row);
                self.term_into(key, &mut term);
                TermRow {
                    term: term.clone(),
                    n: key_len(key) as u8,
                    patients: e.patients,
                    docs: e.docs,
                    count: e.count,
                    indirect: e.patients < k,
                    patient_ids: self
                        .owners(key, e, &counted.extra)
                        .map(|p| self.patients.get(p).to_owned())
                        .collect(),
                }
            })
            .collect())
    }

    /// Finish and return the `terms` table as record batches of at most 2^18 rows.
    pub fn finish(&mut self) -> Result<Vec<RecordBatch>> {
        let k = self.cfg.k;
        let counted = self.counted()?;
        let batch = |chunk: &[u64]| {
            // Rows are scattered over the tables: fetch a few ahead.
            let rows: Vec<(Key, &Entry)> = (0..chunk.len())
                .map(|i| {
                    if let Some(&ahead) = chunk.get(i + AHEAD) {
                        counted.prefetch(ahead);
                    }
                    counted.get(chunk[i])
                })
                .collect();
            let mut term = String::new();
            let mut terms = StringBuilder::with_capacity(rows.len(), rows.len() * 12);
            let mut ids = ListBuilder::new(StringBuilder::new());
            for &(key, e) in &rows {
                self.term_into(key, &mut term);
                terms.append_value(&term);
                for p in self.owners(key, e, &counted.extra) {
                    ids.values().append_value(self.patients.get(p));
                }
                ids.append(true);
            }
            let columns: Vec<ArrayRef> = vec![
                Arc::new(terms.finish()),
                Arc::new(UInt8Array::from_iter_values(
                    rows.iter().map(|r| key_len(r.0) as u8),
                )),
                Arc::new(UInt32Array::from_iter_values(
                    rows.iter().map(|r| r.1.patients),
                )),
                Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.1.docs))),
                Arc::new(UInt64Array::from_iter_values(
                    rows.iter().map(|r| r.1.count),
                )),
                // in_span and direct: filled from the spans, when given, by the Python layer.
                Arc::new(UInt64Array::from(vec![0u64; rows.len()])),
                Arc::new(BooleanArray::from(vec![false; rows.len()])),
                Arc::new(BooleanArray::from_iter(
                    rows.iter().map(|r| Some(r.1.patients < k)),
                )),
                Arc::new(ids.finish()),
            ];
            RecordBatch::try_new(terms_schema(), columns).expect("terms batch matches schema")
        };
        let this = &*self;
        Ok(this.install(|| counted.rows.par_chunks(OUTPUT_ROWS).map(batch).collect()))
    }
}

/// Marks a row of [`Counted::rows`] that is a word id (a densely counted single word); other
/// rows are `worker << 38 | shard << 32 | slot`.
const WORD_ROW: u64 = 1 << 63;

/// The counts of a finished index, with its rows in (n, term) order.
struct Counted {
    workers: Vec<Worker>,
    /// The worker that owns each class of words.
    owner: Vec<u32>,
    extra: ExtraOwners,
    rows: Vec<u64>,
}

impl Counted {
    /// Hint the CPU to fetch a row's table slot.
    #[inline]
    fn prefetch(&self, row: u64) {
        if row & WORD_ROW == 0 {
            let (w, s) = ((row >> 38) as usize, (row >> 32) as usize & (SHARDS - 1));
            self.workers[w].shards[s]
                .table
                .prefetch_slot(row as u32 as usize);
        }
    }

    /// The key and totals of a row.
    #[inline]
    fn get(&self, row: u64) -> (Key, &Entry) {
        if row & WORD_ROW != 0 {
            let id = (row & !WORD_ROW) as u32;
            let w = &self.workers[self.owner[id as usize % CLASSES] as usize];
            (id as Key + 1, w.dense.get(id).expect("a counted word"))
        } else {
            let (w, s) = ((row >> 38) as usize, (row >> 32) as usize & (SHARDS - 1));
            self.workers[w].shards[s].table.at(row as u32 as usize)
        }
    }
}

#[inline(always)]
fn shard_of_hash(hash: u64) -> usize {
    (hash >> 58) as usize % SHARDS
}

/// A document to count: its word ids, document number and patient.
type Unit<'a> = (&'a [u32], u32, u32);

/// Tokenised rows: word ids back to back, each row's end, and the words not yet in the
/// vocabulary (position in `ids`, range in `arena`).
#[derive(Default)]
struct Piece {
    ids: Vec<u32>,
    ends: Vec<u32>,
    misses: Vec<(u32, u32, u32)>,
    arena: String,
}

/// Count documents: every worker scans them all and counts the n-grams whose first word it
/// owns. Word ids are below `vocab_len`.
fn count_units_parallel(
    workers: &mut Vec<Worker>,
    pool: Option<&rayon::ThreadPool>,
    cfg: &IndexConfig,
    units: &[Unit<'_>],
    vocab_len: usize,
    order: &PatientOrder<'_>,
) {
    if units.is_empty() {
        return;
    }
    if workers.is_empty() {
        let threads = pool
            .map_or_else(rayon::current_num_threads, |p| p.current_num_threads())
            .clamp(1, CLASSES);
        *workers = (0..threads).map(|w| Worker::new(w, threads)).collect();
    }
    let mut work = || {
        workers
            .par_iter_mut()
            .for_each(|worker| count_units(units, cfg, worker, vocab_len, order));
    };
    match pool {
        Some(p) => p.install(work),
        None => work(),
    }
}

/// Whether single words are counted in [`Dense`] arrays: when no partition filters terms (a
/// partition pass must not hold an array over the whole vocabulary).
fn dense_unigrams(cfg: &IndexConfig) -> bool {
    cfg.modulus == 1
}

/// Count the n-grams of documents whose first word the worker owns, in order, into its
/// shards (single words into its arrays when [`dense_unigrams`]), prefetching table slots a
/// few updates ahead.
fn count_units(
    units: &[Unit<'_>],
    cfg: &IndexConfig,
    worker: &mut Worker,
    vocab_len: usize,
    order: &PatientOrder<'_>,
) {
    let filter = cfg.modulus > 1;
    let (m, r) = (cfg.modulus as u64, cfg.residue as u64);
    let pow2 = cfg.modulus.is_power_of_two();
    let in_partition = |key: Key| {
        let h = partition_hash(key);
        (if pow2 { h & (m - 1) } else { h % m }) == r
    };
    let dense = dense_unigrams(cfg);
    let Worker {
        owns,
        shards,
        dense: unigrams,
    } = worker;
    if dense {
        let per_class = vocab_len.div_ceil(CLASSES);
        for (c, class) in unigrams.classes.iter_mut().enumerate() {
            if owns[c] && class.len() < per_class {
                let len = per_class.max(class.len() * 2).max(16);
                class.resize(len, Entry::default());
            }
        }
    }
    let first_n = usize::from(dense);
    // A small FIFO of pending updates: the slot of each is prefetched when it enters.
    let mut ring = [(0 as Key, 0u64, 0u32, 0u32); AHEAD];
    let mut head = 0usize;
    let mut pending = 0usize;
    for &(ids, doc, patient) in units {
        for i in 0..ids.len() {
            let first = ids[i] as usize;
            if !owns[first % CLASSES] {
                continue;
            }
            let mut key: Key = first as Key + 1;
            if dense {
                let e = &mut unigrams.classes[first % CLASSES][first / CLASSES];
                let at = (doc, patient);
                count_entry(e, &mut unigrams.extra_owners, key, at, cfg.k, order);
            }
            for n in first_n..cfg.max_n.min(ids.len() - i) {
                key |= ((ids[i + n] as u128) + 1) << (32 * n);
                if filter && !in_partition(key) {
                    continue;
                }
                let h = key_hash(key);
                shards[shard_of_hash(h)].table.prefetch(h);
                if pending == AHEAD {
                    let (k0, h0, d0, p0) = ring[head];
                    shards[shard_of_hash(h0)].count(k0, h0, (d0, p0), cfg.k, order);
                    head = (head + 1) % AHEAD;
                    pending -= 1;
                }
                ring[(head + pending) % AHEAD] = (key, h, doc, patient);
                pending += 1;
            }
        }
    }
    for j in 0..pending {
        let (k0, h0, d0, p0) = ring[(head + j) % AHEAD];
        shards[shard_of_hash(h0)].count(k0, h0, (d0, p0), cfg.k, order);
    }
}

/// The Arrow schema of the `terms` table as the index writes it. `in_span` (a single word's
/// occurrences inside direct-identifier spans) and `direct` are written as 0 and false: the
/// Python layer fills them when the index is given spans.
pub fn terms_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("term", DataType::Utf8, false),
        Field::new("n", DataType::UInt8, false),
        Field::new("patients", DataType::UInt32, false),
        Field::new("docs", DataType::UInt32, false),
        Field::new("count", DataType::UInt64, false),
        Field::new("in_span", DataType::UInt64, false),
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
    use crate::words::for_each_word;
    use arrow_array::StringArray;
    use std::collections::{BTreeMap, BTreeSet};

    fn arr(v: &[&str]) -> ArrayRef {
        Arc::new(StringArray::from_iter_values(v.iter().copied()))
    }

    /// A plain reference: per (n, term) -> (patients, docs, count).
    fn reference(docs: &[(&str, &str)], max_n: usize) -> BTreeMap<(u8, String), (u32, u32, u64)> {
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
                            let cfg = IndexConfig {
                                max_n,
                                modulus,
                                residue,
                                threads,
                                ..Default::default()
                            };
                            got_all.extend(run(DOCS, cfg, batch));
                        }
                        if modulus == 1 {
                            let order: Vec<_> =
                                got_all.iter().map(|r| (r.n, r.term.clone())).collect();
                            let mut sorted = order.clone();
                            sorted.sort();
                            assert_eq!(order, sorted, "rows sorted by (n, term)");
                        }
                        let got: BTreeMap<_, _> = got_all
                            .iter()
                            .map(|r| ((r.n, r.term.clone()), (r.patients, r.docs, r.count)))
                            .collect();
                        assert_eq!(got.len(), got_all.len());
                        assert_eq!(
                            got, want,
                            "n={max_n} batch={batch} threads={threads} m={modulus}"
                        );
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
        assert_eq!(
            (dupont.patients, dupont.docs, dupont.count, dupont.indirect),
            (2, 2, 3, false)
        );
        assert_eq!(dupont.patient_ids, ["p1", "p2"]);
        let nsr = get("nsr");
        assert!(nsr.indirect);
        assert_eq!(nsr.patient_ids, ["p3"]);
        let zoe = get("zoë");
        assert_eq!((zoe.patients, zoe.indirect), (2, false));
        let cfg = IndexConfig {
            k: 4,
            ..Default::default()
        };
        let rows = run(DOCS, cfg, 5);
        let chest = rows.iter().find(|r| r.term == "chest").unwrap();
        // By id_hash: p3 (0x19ca...) < p1 (0x5b05...) < p2 (0xc905...).
        assert_eq!(chest.patient_ids, ["p3", "p1", "p2"]);
        assert!(chest.indirect);
    }

    /// The patient ids a term keeps are the `k` smallest by `(id_hash, id)`, in that order,
    /// whatever the order of the patients, the batching, the threads and the partitions.
    #[test]
    fn kept_patients_are_the_k_smallest_by_hash() {
        // Six patients, each a few notes; every patient uses "common", some "some".
        let patients: Vec<String> = (0..6).map(|i| format!("patient-{i}")).collect();
        let notes = |p: usize| -> Vec<String> {
            let mut v = vec![format!("common w{p} c{}", p % 2)];
            if p % 3 != 0 {
                v.push(format!("some common x{}", p % 3));
            }
            v
        };
        // Orders of the patients (documents stay grouped): a few fixed permutations.
        let orders: [[usize; 6]; 4] = [
            [0, 1, 2, 3, 4, 5],
            [5, 4, 3, 2, 1, 0],
            [2, 5, 0, 3, 1, 4],
            [3, 0, 4, 1, 5, 2],
        ];
        let mut want_all: Option<Vec<TermRow>> = None;
        for k in 1..=4u32 {
            want_all = None;
            for order in &orders {
                let owned: Vec<(String, String)> = order
                    .iter()
                    .flat_map(|&p| notes(p).into_iter().map(move |t| (p, t)))
                    .map(|(p, t)| (patients[p].clone(), t))
                    .collect();
                let docs: Vec<(&str, &str)> = owned
                    .iter()
                    .map(|(p, t)| (p.as_str(), t.as_str()))
                    .collect();
                for (batch, threads, modulus) in [(1, 1, 1u32), (3, 2, 1), (2, 3, 2)] {
                    let mut rows = Vec::new();
                    for residue in 0..modulus {
                        let cfg = IndexConfig {
                            max_n: 2,
                            k,
                            modulus,
                            residue,
                            threads,
                            ..Default::default()
                        };
                        rows.extend(run(&docs, cfg, batch));
                    }
                    rows.sort_by(|a, b| (a.n, &a.term).cmp(&(b.n, &b.term)));
                    // The reference: each term's patients, sorted by (id_hash, id), first k.
                    for r in &rows {
                        let mut users: Vec<&str> = docs
                            .iter()
                            .filter(|(_, t)| {
                                let words: Vec<&str> = t.split(' ').collect();
                                words.windows(r.n as usize).any(|w| w.join(" ") == r.term)
                            })
                            .map(|(p, _)| *p)
                            .collect();
                        users.sort_by_key(|p| (id_hash(p), p.to_string()));
                        users.dedup();
                        users.truncate(k as usize);
                        assert_eq!(r.patient_ids, users, "k={k} term={}", r.term);
                    }
                    match &want_all {
                        None => want_all = Some(rows),
                        Some(w) => assert_eq!(&rows, w, "k={k} order={order:?}"),
                    }
                }
            }
        }
        assert!(want_all.is_some());
    }

    #[test]
    fn patient_order_breaks_hash_ties_by_id() {
        let mut names = Vocab::default();
        let (a, b) = (names.intern_str("b"), names.intern_str("a"));
        let hashes = [7u64, 7];
        let order = PatientOrder {
            hashes: &hashes,
            names: &names,
        };
        assert!(order.less(b, a) && !order.less(a, b) && !order.less(a, a));
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
        assert!(IndexBuilder::new(IndexConfig {
            max_n: 5,
            ..Default::default()
        })
        .is_err());
        assert!(IndexBuilder::new(IndexConfig {
            k: 0,
            ..Default::default()
        })
        .is_err());
        let cfg = IndexConfig {
            modulus: 2,
            residue: 2,
            ..Default::default()
        };
        assert!(IndexBuilder::new(cfg).is_err());
        let mut b = IndexBuilder::new(IndexConfig::default()).unwrap();
        let nulls: ArrayRef = Arc::new(StringArray::from(vec![Some("a"), None]));
        let err = b.add(&nulls, &arr(&["x", "y"])).unwrap_err();
        assert_eq!(
            err,
            CoreError::Null {
                what: "patient_id",
                row: 1
            }
        );
    }

    #[test]
    fn key_len_counts_words() {
        assert_eq!(key_len(1), 1);
        assert_eq!(key_len(1 | (5 << 32)), 2);
        assert_eq!(key_len(1 | (5 << 32) | (7u128 << 64) | (9u128 << 96)), 4);
    }
}

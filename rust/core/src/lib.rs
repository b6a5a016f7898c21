//! phisieve-core: the pure-Rust core of phisieve.
//!
//! * [`words`]: words as maximal runs of Unicode letters, marks and digits, with byte and
//!   code-point offsets.
//! * [`normalize`]: term normalisation (NFKC + lower-case by default).
//! * [`vocab`]: an exact string interner.
//! * [`hash`]: n-gram keys ([`hash::Key`]), the integer hashes over them and the fixed hash
//!   of a patient id that orders the patients a term keeps (a leaf module).
//! * [`index`]: the patient x term index (distinct patients, documents and occurrences per
//!   word n-gram), multithreaded over record batches, exact for any thread count or batching.
//! * [`marker`]: marks the words of a text that a blacklist of indirect n-grams protects.
//! * [`masking`]: masked- and causal-LM labels that never target protected words.
//! * [`placeholders`]: the grammar of MIMIC-III `[** ... **]` placeholders.
//! * [`text`]: read-only views over Arrow string columns.
//!
//! This crate has no Python dependency; `rust/py` wraps it.

pub mod align;
pub mod crf;
pub mod crf_words;
pub mod error;
pub mod hash;
pub mod ignorable;
pub mod index;
pub mod marker;
pub mod masking;
pub mod normalize;
pub mod pack;
pub mod placeholders;
pub mod rules;
pub mod surrogate;
pub mod table;
pub mod text;
pub mod vocab;
pub mod words;

pub use error::{CoreError, Result};
pub use index::{IndexBuilder, IndexConfig, TermRow};
pub use marker::{Marker, Policy};
pub use normalize::Normalizer;
pub use words::{word_spans, WordSpan};

/// The largest supported n-gram length: keys pack up to four 32-bit word ids into a `u128`.
pub const MAX_N: usize = 4;

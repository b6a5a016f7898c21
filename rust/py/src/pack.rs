//! `Packer`: documents packed into model sequences (`phisieve_core::pack`).

use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Int32Builder, ListBuilder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::UInt32Type;
use arrow_array::{ArrayRef, RecordBatch};
use phisieve_core::CoreError;
use pyo3::prelude::*;
use pyo3_arrow::{PyArray, PyRecordBatch};

use crate::errors::to_py_err;

/// Packs documents into model sequences for `encode` (`phisieve_core::pack`).
#[pyclass(module = "phisieve._core")]
struct Packer {
    inner: phisieve_core::pack::Packer,
}

#[pymethods]
impl Packer {
    #[new]
    #[pyo3(signature = (max_len, prefix, suffix, doc_end))]
    fn new(
        py: Python<'_>,
        max_len: usize,
        prefix: Vec<u32>,
        suffix: Vec<u32>,
        doc_end: Option<u32>,
    ) -> PyResult<Self> {
        let special = phisieve_core::pack::Special {
            prefix,
            suffix,
            doc_end,
        };
        let inner =
            phisieve_core::pack::Packer::new(max_len, special).map_err(|e| to_py_err(py, e))?;
        Ok(Packer { inner })
    }

    /// A packer with the same settings that has seen nothing.
    fn fresh(&self) -> Self {
        Packer {
            inner: self.inner.fresh(),
        }
    }

    /// Whether no sequence is being packed or waiting to be taken.
    fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// Tokens left out so far because their sequence held no word.
    #[getter]
    fn dropped_tokens(&self) -> u64 {
        self.inner.dropped_tokens
    }

    #[setter]
    fn set_dropped_tokens(&mut self, value: u64) {
        self.inner.dropped_tokens = value;
    }

    /// The current patient's last sequence is complete.
    fn finish_patient(&mut self) {
        self.inner.finish_patient();
    }

    /// Append a batch's documents, in order: document `r` (patient `patients[r]`, id
    /// `doc_ids[r]`) holds the tokens `bounds[r]..bounds[r + 1]` of `ids` (uint32), `words`
    /// (int64, document-local word numbers, -1: none), `direct` and `indirect` (bool).
    #[allow(clippy::too_many_arguments)]
    fn add_batch(
        &mut self,
        py: Python<'_>,
        patients: Vec<String>,
        doc_ids: Vec<String>,
        bounds: PyArray,
        ids: PyArray,
        words: PyArray,
        direct: PyArray,
        indirect: PyArray,
    ) -> PyResult<()> {
        let bad = |msg: &str| to_py_err(py, CoreError::InvalidArgument(msg.to_string()));
        let (bounds, _) = bounds.into_inner();
        let (ids, _) = ids.into_inner();
        let (words, _) = words.into_inner();
        let (direct, _) = direct.into_inner();
        let (indirect, _) = indirect.into_inner();
        let bounds = bounds
            .as_primitive_opt::<arrow_array::types::Int64Type>()
            .ok_or_else(|| bad("bounds must be int64"))?
            .values();
        let ids = ids
            .as_primitive_opt::<UInt32Type>()
            .ok_or_else(|| bad("ids must be uint32"))?
            .values();
        let words = words
            .as_primitive_opt::<arrow_array::types::Int64Type>()
            .ok_or_else(|| bad("words must be int64"))?
            .values();
        let direct: Vec<bool> = direct
            .as_boolean_opt()
            .ok_or_else(|| bad("direct must be bool"))?
            .values()
            .iter()
            .collect();
        let indirect: Vec<bool> = indirect
            .as_boolean_opt()
            .ok_or_else(|| bad("indirect must be bool"))?
            .values()
            .iter()
            .collect();
        let docs = patients.len();
        if doc_ids.len() != docs || bounds.len() != docs + 1 {
            return Err(bad(
                "one patient and doc id per document, and documents + 1 bounds",
            ));
        }
        let n = ids.len();
        if words.len() != n || direct.len() != n || indirect.len() != n {
            return Err(bad(
                "ids, words, direct and indirect must have one entry per token",
            ));
        }
        for r in 0..docs {
            let (a, b) = (bounds[r], bounds[r + 1]);
            if a < 0 || b < a || b as usize > n {
                return Err(bad("bounds must rise within the tokens"));
            }
            let t = a as usize..b as usize;
            self.inner
                .add(
                    &patients[r],
                    &doc_ids[r],
                    &ids[t.clone()],
                    &words[t.clone()],
                    &direct[t.clone()],
                    &indirect[t],
                )
                .map_err(|e| to_py_err(py, e))?;
        }
        Ok(())
    }

    /// The finished sequences as a record batch (`patient_id`, `doc_ids`, `input_ids`,
    /// `word_ids`, `protected`, `direct`, `indirect`), or None when there is none.
    fn take<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let laid = self.inner.take();
        if laid.is_empty() {
            return Ok(None);
        }
        let mut patient = StringBuilder::new();
        let mut docs = ListBuilder::new(StringBuilder::new());
        let mut ids = ListBuilder::new(arrow_array::builder::UInt32Builder::new());
        let mut words = ListBuilder::new(Int32Builder::new());
        let mut protected = ListBuilder::new(BooleanBuilder::new());
        let mut direct = ListBuilder::new(BooleanBuilder::new());
        let mut indirect = ListBuilder::new(BooleanBuilder::new());
        for s in &laid {
            patient.append_value(&s.patient);
            for d in &s.doc_ids {
                docs.values().append_value(d);
            }
            docs.append(true);
            ids.values().append_slice(&s.ids);
            ids.append(true);
            words.values().append_slice(&s.words);
            words.append(true);
            for (&d, &x) in s.direct.iter().zip(&s.indirect) {
                protected.values().append_value(d || x);
                direct.values().append_value(d);
                indirect.values().append_value(x);
            }
            protected.append(true);
            direct.append(true);
            indirect.append(true);
        }
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("patient_id", Arc::new(patient.finish())),
            ("doc_ids", Arc::new(docs.finish())),
            ("input_ids", Arc::new(ids.finish())),
            ("word_ids", Arc::new(words.finish())),
            ("protected", Arc::new(protected.finish())),
            ("direct", Arc::new(direct.finish())),
            ("indirect", Arc::new(indirect.finish())),
        ];
        let batch = RecordBatch::try_from_iter(columns)
            .map_err(|e| to_py_err(py, CoreError::InvalidArgument(e.to_string())))?;
        Ok(Some(PyRecordBatch::new(batch).into_pyarrow(py)?))
    }
}

/// Add this file's classes and functions to `phisieve._core`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Packer>()?;
    Ok(())
}

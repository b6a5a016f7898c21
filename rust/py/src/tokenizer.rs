//! `ModelTokenizer`: a Hugging Face `tokenizer.json` run from Rust (the `tokenizers` crate).

use std::sync::Arc;

use arrow_array::ArrayRef;
use phisieve_core::CoreError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::convert::to_pyarrow;
use crate::errors::to_py_err;

/// A Hugging Face tokenizer (its `tokenizer.json`), run from Rust for `encode`: texts in, token
/// ids and character offsets out as Arrow arrays, with no Python object per token. Truncation
/// and padding are off, and special tokens written in a text are encoded as text.
#[pyclass(frozen, module = "phisieve._core")]
struct ModelTokenizer {
    inner: tokenizers::Tokenizer,
}

#[pymethods]
impl ModelTokenizer {
    #[new]
    fn new(py: Python<'_>, json: &str) -> PyResult<Self> {
        let mut inner: tokenizers::Tokenizer = json.parse().map_err(|e| {
            to_py_err(
                py,
                CoreError::InvalidArgument(format!("not a tokenizer.json this build reads: {e}")),
            )
        })?;
        inner
            .with_truncation(None)
            .map_err(|e| to_py_err(py, CoreError::InvalidArgument(e.to_string())))?;
        inner.with_padding(None);
        inner.set_encode_special_tokens(true);
        Ok(Self { inner })
    }

    /// Token ids (uint32), start and end character offsets (int64) of every text's tokens
    /// (no special tokens added), and each text's token count (int64).
    fn encode<'py>(&self, py: Python<'py>, texts: Vec<String>) -> PyResult<Bound<'py, PyTuple>> {
        let tokenizer = &self.inner;
        let encodings = py
            .detach(|| tokenizer.encode_batch_char_offsets(texts, false))
            .map_err(|_| {
                to_py_err(
                    py,
                    CoreError::InvalidArgument("the tokenizer failed on a text".to_string()),
                )
            })?;
        let total: usize = encodings.iter().map(|e| e.len()).sum();
        let (mut ids, mut starts, mut ends) = (
            Vec::with_capacity(total),
            Vec::with_capacity(total),
            Vec::with_capacity(total),
        );
        let mut counts = Vec::with_capacity(encodings.len());
        for e in &encodings {
            ids.extend_from_slice(e.get_ids());
            for &(a, b) in e.get_offsets() {
                starts.push(a as i64);
                ends.push(b as i64);
            }
            counts.push(e.len() as i64);
        }
        let arrays: [ArrayRef; 4] = [
            Arc::new(arrow_array::UInt32Array::from(ids)),
            Arc::new(arrow_array::Int64Array::from(starts)),
            Arc::new(arrow_array::Int64Array::from(ends)),
            Arc::new(arrow_array::Int64Array::from(counts)),
        ];
        let arrays = arrays
            .into_iter()
            .map(|a| to_pyarrow(py, a))
            .collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(py, arrays)
    }
}

/// Add this file's classes and functions to `phisieve._core`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ModelTokenizer>()?;
    Ok(())
}

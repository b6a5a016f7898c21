//! `tokenize` and `normalize_word`: phisieve's words and the terms they become
//! (`phisieve_core::words`, `phisieve_core::normalize`).

use std::sync::Arc;

use arrow_array::builder::{Int32Builder, ListBuilder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use phisieve_core::CoreError;
use pyo3::prelude::*;
use pyo3_arrow::{PyArray, PyRecordBatch};

use crate::convert::{normalizer, texts_col};
use crate::errors::run;

/// Words of each text: code-point `starts`/`ends` and normalised `words` (list columns).
#[pyfunction]
#[pyo3(signature = (texts, normalize="nfkc_lower"))]
fn tokenize<'py>(py: Python<'py>, texts: PyArray, normalize: &str) -> PyResult<Bound<'py, PyAny>> {
    let norm = normalizer(py, normalize)?;
    let (texts, _) = texts.into_inner();
    let col = texts_col(py, &texts)?;
    let batch = run(py, move || {
        let mut starts = ListBuilder::new(Int32Builder::new());
        let mut ends = ListBuilder::new(Int32Builder::new());
        let mut words = ListBuilder::new(StringBuilder::new());
        let mut buf = String::new();
        for i in 0..col.len() {
            let text = col.get(i).unwrap_or("");
            for w in phisieve_core::word_spans(text) {
                starts.values().append_value(w.char_start as i32);
                ends.values().append_value(w.char_end as i32);
                buf.clear();
                norm.normalize_into(&text[w.byte_start..w.byte_end], &mut buf);
                words.values().append_value(&buf);
            }
            starts.append(true);
            ends.append(true);
            words.append(true);
        }
        let item = |t: DataType| DataType::List(Arc::new(Field::new("item", t, true)));
        let schema = Schema::new(vec![
            Field::new("starts", item(DataType::Int32), false),
            Field::new("ends", item(DataType::Int32), false),
            Field::new("words", item(DataType::Utf8), false),
        ]);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(starts.finish()),
            Arc::new(ends.finish()),
            Arc::new(words.finish()),
        ];
        RecordBatch::try_new(Arc::new(schema), columns)
            .map_err(|e| CoreError::InvalidArgument(e.to_string()))
    })?;
    PyRecordBatch::new(batch).into_pyarrow(py)
}

/// Normalise one word as the index does (for tests and debugging).
#[pyfunction]
#[pyo3(signature = (word, normalize="nfkc_lower"))]
fn normalize_word(py: Python<'_>, word: &str, normalize: &str) -> PyResult<String> {
    Ok(normalizer(py, normalize)?.normalize(word))
}

/// Add this file's classes and functions to `phisieve._core`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(tokenize, m)?)?;
    m.add_function(wrap_pyfunction!(normalize_word, m)?)?;
    Ok(())
}

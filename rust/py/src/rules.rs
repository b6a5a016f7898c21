//! `detect_rules`: rule detections of direct identifiers (`phisieve_core::rules`).

use std::sync::Arc;

use arrow_array::builder::{Int32Builder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use phisieve_core::CoreError;
use pyo3::prelude::*;
use pyo3_arrow::{PyArray, PyRecordBatch};

use crate::convert::texts_col;
use crate::errors::run;

/// Rule detections of direct identifiers, one row each: `text` (row of the input), code-point
/// `start`/`end`, `label`, `rule` and `score`. See `phisieve_core::rules`.
#[pyfunction]
fn detect_rules<'py>(py: Python<'py>, texts: PyArray) -> PyResult<Bound<'py, PyAny>> {
    use arrow_array::builder::{Float32Builder, UInt64Builder};
    use phisieve_core::rules::detect;
    use rayon::prelude::*;
    let (texts, _) = texts.into_inner();
    let col = texts_col(py, &texts)?;
    let batch = run(py, move || {
        let per_row: Vec<Vec<phisieve_core::rules::Detection>> = (0..col.len())
            .into_par_iter()
            .with_min_len(64)
            .map(|i| col.get(i).map(detect).unwrap_or_default())
            .collect();
        let mut row = UInt64Builder::new();
        let (mut start, mut end) = (Int32Builder::new(), Int32Builder::new());
        let (mut label, mut rule) = (StringBuilder::new(), StringBuilder::new());
        let mut score = Float32Builder::new();
        for (i, found) in per_row.iter().enumerate() {
            for d in found {
                let fit = |v: usize| {
                    i32::try_from(v).map_err(|_| {
                        CoreError::InvalidArgument(format!("row {i}: offsets exceed int32"))
                    })
                };
                row.append_value(i as u64);
                start.append_value(fit(d.char_start)?);
                end.append_value(fit(d.char_end)?);
                label.append_value(d.label);
                rule.append_value(d.rule);
                score.append_value(d.score);
            }
        }
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("text", Arc::new(row.finish())),
            ("start", Arc::new(start.finish())),
            ("end", Arc::new(end.finish())),
            ("label", Arc::new(label.finish())),
            ("rule", Arc::new(rule.finish())),
            ("score", Arc::new(score.finish())),
        ];
        RecordBatch::try_from_iter(columns).map_err(|e| CoreError::InvalidArgument(e.to_string()))
    })?;
    PyRecordBatch::new(batch).into_pyarrow(py)
}

/// Add this file's classes and functions to `phisieve._core`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(detect_rules, m)?)?;
    Ok(())
}

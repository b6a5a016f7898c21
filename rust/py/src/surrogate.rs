//! `keyed_draws` and `splice`: keyed draws and text edits for surrogates
//! (`phisieve_core::surrogate`).

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt64Type};
use arrow_array::{Array, ArrayRef};
use phisieve_core::text::StrCol;
use phisieve_core::CoreError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3_arrow::PyArray;

use crate::convert::{texts_col, to_pyarrow};
use crate::errors::{run, to_py_err};

/// Keyed draws, one `uint64` per row: HMAC-SHA256 under `secret` of the row's values in
/// `parts` (string arrays of one length; a null differs from ""). See
/// `phisieve_core::surrogate::KeyedHasher`.
#[pyfunction]
fn keyed_draws<'py>(
    py: Python<'py>,
    secret: &[u8],
    parts: Vec<PyArray>,
) -> PyResult<Bound<'py, PyAny>> {
    use phisieve_core::surrogate::KeyedHasher;
    use rayon::prelude::*;
    let arrays: Vec<ArrayRef> = parts.into_iter().map(|p| p.into_inner().0).collect();
    let cols = arrays
        .iter()
        .map(|a| StrCol::new(a, "part"))
        .collect::<phisieve_core::Result<Vec<_>>>()
        .map_err(|e| to_py_err(py, e))?;
    let rows = cols.first().map_or(0, |c| c.len());
    if cols.iter().any(|c| c.len() != rows) {
        return Err(to_py_err(
            py,
            CoreError::InvalidArgument("all parts must have the same length".into()),
        ));
    }
    let draws = run(py, move || {
        let hasher = KeyedHasher::new(secret)?;
        Ok((0..rows)
            .into_par_iter()
            .with_min_len(4096)
            .map(|i| {
                let parts: Vec<Option<&[u8]>> =
                    cols.iter().map(|c| c.get(i).map(str::as_bytes)).collect();
                hasher.draw(&parts)
            })
            .collect::<Vec<u64>>())
    })?;
    to_pyarrow(py, Arc::new(arrow_array::UInt64Array::from(draws)))
}

/// Replace code-point ranges of texts: edit `i` puts `with_[i]` in place of
/// `starts[i]..ends[i]` of `texts[rows[i]]` (rows not decreasing; one row's edits sorted and
/// disjoint). Returns `(texts, starts, ends)`: the new texts (large_string) and each
/// replacement's code-point range in its new text (int32).
#[pyfunction]
fn splice<'py>(
    py: Python<'py>,
    texts: PyArray,
    rows: PyArray,
    starts: PyArray,
    ends: PyArray,
    with_: PyArray,
) -> PyResult<Bound<'py, PyTuple>> {
    use phisieve_core::surrogate::splice_column;
    let (texts, _) = texts.into_inner();
    let (with_, _) = with_.into_inner();
    let bad = |what: &str| {
        to_py_err(
            py,
            CoreError::InvalidArgument(format!("{what} must be a non-null integer array")),
        )
    };
    let rows = rows.into_inner().0;
    let rows = rows
        .as_primitive_opt::<UInt64Type>()
        .filter(|a| a.null_count() == 0)
        .ok_or_else(|| bad("rows (uint64)"))?;
    let (starts, ends) = (starts.into_inner().0, ends.into_inner().0);
    let starts = starts
        .as_primitive_opt::<Int32Type>()
        .filter(|a| a.null_count() == 0)
        .ok_or_else(|| bad("starts (int32)"))?;
    let ends = ends
        .as_primitive_opt::<Int32Type>()
        .filter(|a| a.null_count() == 0)
        .ok_or_else(|| bad("ends (int32)"))?;
    let col = texts_col(py, &texts)?;
    let with = StrCol::new(&with_, "replacement").map_err(|e| to_py_err(py, e))?;
    let spliced = run(py, move || {
        splice_column(&col, rows.values(), starts.values(), ends.values(), &with)
    })?;
    PyTuple::new(
        py,
        [
            to_pyarrow(py, Arc::new(spliced.texts))?,
            to_pyarrow(py, Arc::new(arrow_array::Int32Array::from(spliced.starts)))?,
            to_pyarrow(py, Arc::new(arrow_array::Int32Array::from(spliced.ends)))?,
        ],
    )
}

/// Add this file's classes and functions to `phisieve._core`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(keyed_draws, m)?)?;
    m.add_function(wrap_pyfunction!(splice, m)?)?;
    Ok(())
}

//! `align_tokens`: model tokens aligned with phisieve's words (`phisieve_core::align`).

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef};
use phisieve_core::CoreError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3_arrow::PyArray;

use crate::convert::to_pyarrow;
use crate::errors::{run, to_py_err};

/// Model tokens aligned with phisieve's words (`phisieve_core::align::align`): per token the
/// text-local number of the first word it overlaps (int64, -1: none), and per flag (bool
/// arrays, one entry per word) whether any word it overlaps has it.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn align_tokens<'py>(
    py: Python<'py>,
    tok_starts: PyArray,
    tok_ends: PyArray,
    tok_counts: PyArray,
    word_starts: PyArray,
    word_ends: PyArray,
    word_counts: PyArray,
    flags: Vec<PyArray>,
) -> PyResult<Bound<'py, PyTuple>> {
    use arrow_array::types::Int64Type;
    let bad = |m: String| to_py_err(py, CoreError::InvalidArgument(m));
    let ints = [
        tok_starts,
        tok_ends,
        tok_counts,
        word_starts,
        word_ends,
        word_counts,
    ]
    .map(|a| a.into_inner().0);
    let names = [
        "tok_starts",
        "tok_ends",
        "tok_counts",
        "word_starts",
        "word_ends",
        "word_counts",
    ];
    let mut cols = Vec::with_capacity(6);
    for (a, name) in ints.iter().zip(names) {
        let col = a
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| bad(format!("{name} must be int64, not {}", a.data_type())))?;
        cols.push(col.values().as_ref());
    }
    let flag_arrays: Vec<ArrayRef> = flags.into_iter().map(|f| f.into_inner().0).collect();
    let mut flag_values: Vec<Vec<bool>> = Vec::with_capacity(flag_arrays.len());
    for f in &flag_arrays {
        let b = f
            .as_boolean_opt()
            .ok_or_else(|| bad(format!("flags must be bool, not {}", f.data_type())))?;
        flag_values.push(b.values().iter().collect());
    }
    let aligned = run(py, || {
        let refs: Vec<&[bool]> = flag_values.iter().map(Vec::as_slice).collect();
        phisieve_core::align::align(cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], &refs)
    })?;
    let words = to_pyarrow(py, Arc::new(arrow_array::Int64Array::from(aligned.words)))?;
    let flags = aligned
        .flags
        .into_iter()
        .map(|f| to_pyarrow(py, Arc::new(arrow_array::BooleanArray::from(f))))
        .collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(py, [words, PyTuple::new(py, flags)?.into_any()])
}

/// Add this file's classes and functions to `phisieve._core`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(align_tokens, m)?)?;
    Ok(())
}

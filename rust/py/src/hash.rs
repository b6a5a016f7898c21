//! `id_hashes`: the fixed hash of a patient id (`phisieve_core::hash`).

use std::sync::Arc;

use phisieve_core::text::StrCol;
use pyo3::prelude::*;
use pyo3_arrow::PyArray;

use crate::convert::to_pyarrow;
use crate::errors::{run, to_py_err};

/// The fixed hash of each id of a string array (`phisieve_core::hash::id_hash`: FNV-1a 64
/// over the UTF-8 bytes, finished with SplitMix64's output function), as a `uint64` array;
/// null for a null id. The index keeps per term the `k` patients smallest by it.
#[pyfunction]
fn id_hashes<'py>(py: Python<'py>, ids: PyArray) -> PyResult<Bound<'py, PyAny>> {
    use phisieve_core::hash::id_hash;
    let (ids, _) = ids.into_inner();
    let col = StrCol::new(&ids, "id").map_err(|e| to_py_err(py, e))?;
    let hashes = run(py, move || {
        Ok(arrow_array::UInt64Array::from_iter(
            (0..col.len()).map(|i| col.get(i).map(id_hash)),
        ))
    })?;
    to_pyarrow(py, Arc::new(hashes))
}

/// Add this file's classes and functions to `phisieve._core`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(id_hashes, m)?)?;
    Ok(())
}

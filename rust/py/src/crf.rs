//! `CrfTagger`: linear-chain CRF inference (`phisieve_core::crf`).

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef};
use phisieve_core::text::StrCol;
use phisieve_core::CoreError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3_arrow::PyArray;

use crate::convert::to_pyarrow;
use crate::errors::{run, to_py_err};

/// A trained linear-chain CRF (the `crf` recognizer), tagging from Arrow attribute strings:
/// `phisieve_core::crf::Crf`.
#[pyclass(frozen, module = "phisieve._core")]
struct CrfTagger {
    inner: phisieve_core::crf::Crf,
}

#[pymethods]
impl CrfTagger {
    #[new]
    fn new(
        py: Python<'_>,
        labels: Vec<String>,
        attributes: Vec<String>,
        weights: Vec<f64>,
        transitions: Vec<f64>,
    ) -> PyResult<Self> {
        phisieve_core::crf::Crf::new(labels, attributes, weights, transitions)
            .map(|inner| Self { inner })
            .map_err(|e| to_py_err(py, e))
    }

    /// The labels, in the order of label numbers and marginals.
    #[getter]
    fn labels(&self) -> Vec<String> {
        self.inner.labels().to_vec()
    }

    /// Tag sequences: position `t`'s attributes are the values at row `t` of `columns`
    /// (string arrays of one length; a null is no attribute), `per_sequence` (int64) how many
    /// positions each sequence has. Returns the best labelling's label numbers (uint32, one
    /// per position) and the label marginals (float64, positions × labels, row-major).
    fn tag<'py>(
        &self,
        py: Python<'py>,
        columns: Vec<PyArray>,
        per_sequence: PyArray,
    ) -> PyResult<Bound<'py, PyTuple>> {
        use arrow_array::types::Int64Type;
        let bad = |m: String| to_py_err(py, CoreError::InvalidArgument(m));
        let arrays: Vec<ArrayRef> = columns.into_iter().map(|c| c.into_inner().0).collect();
        let cols = arrays
            .iter()
            .map(|a| StrCol::new(a, "attribute column"))
            .collect::<phisieve_core::Result<Vec<_>>>()
            .map_err(|e| to_py_err(py, e))?;
        let counts = per_sequence.into_inner().0;
        let counts = counts.as_primitive_opt::<Int64Type>().ok_or_else(|| {
            bad(format!(
                "per_sequence must be int64, not {}",
                counts.data_type()
            ))
        })?;
        if counts.null_count() > 0 {
            return Err(bad("per_sequence has nulls".to_string()));
        }
        let per_sequence = counts.values().as_ref();
        let tagged = run(py, || self.inner.tag(&cols, per_sequence))?;
        let labels = to_pyarrow(py, Arc::new(arrow_array::UInt32Array::from(tagged.labels)))?;
        let marginals = to_pyarrow(
            py,
            Arc::new(arrow_array::Float64Array::from(tagged.marginals)),
        )?;
        PyTuple::new(py, [labels, marginals])
    }
}

/// Add this file's classes and functions to `phisieve._core`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CrfTagger>()?;
    Ok(())
}

//! Argument and result conversions shared by the bindings: a normaliser by name, a string
//! column of texts, an Arrow array handed to pyarrow.

use arrow_array::ArrayRef;
use phisieve_core::text::StrCol;
use phisieve_core::Normalizer;
use pyo3::prelude::*;
use pyo3_arrow::PyArray;

use crate::errors::to_py_err;

pub(crate) fn normalizer(py: Python<'_>, name: &str) -> PyResult<Normalizer> {
    Normalizer::parse(name).map_err(|e| to_py_err(py, e))
}

pub(crate) fn texts_col<'a>(py: Python<'_>, texts: &'a ArrayRef) -> PyResult<StrCol<'a>> {
    StrCol::new(texts, "text").map_err(|e| to_py_err(py, e))
}

pub(crate) fn to_pyarrow<'py>(py: Python<'py>, array: ArrayRef) -> PyResult<Bound<'py, PyAny>> {
    py.import("pyarrow")?
        .getattr("array")?
        .call1((PyArray::from_array_ref(array).into_pyobject(py)?,))
}

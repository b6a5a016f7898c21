//! `Marker`: the words of texts that a blacklist of indirect n-grams protects
//! (`phisieve_core::marker`).

use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, ListBuilder};
use arrow_array::ArrayRef;
use phisieve_core::marker::Policy;
use phisieve_core::text::StrCol;
use phisieve_core::Marker;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3_arrow::PyArray;

use crate::convert::{normalizer, texts_col};
use crate::errors::{run, to_py_err};

/// A blacklist of indirect n-grams that marks the protected words of texts.
#[pyclass(module = "phisieve._core", name = "Marker")]
struct PyMarker {
    inner: Marker,
}

#[pymethods]
impl PyMarker {
    #[new]
    #[pyo3(signature = (terms, normalize="nfkc_lower"))]
    fn new(py: Python<'_>, terms: PyArray, normalize: &str) -> PyResult<Self> {
        let mut inner = Marker::new(normalizer(py, normalize)?);
        let (terms, _) = terms.into_inner();
        let col = StrCol::new(&terms, "term").map_err(|e| to_py_err(py, e))?;
        run(py, || {
            for i in 0..col.len() {
                if let Some(t) = col.get(i) {
                    inner.insert(t)?;
                }
            }
            Ok(())
        })?;
        Ok(Self { inner })
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Per text, one flag per word: whether `policy` ("all" or "minimal") protects it.
    #[pyo3(signature = (texts, policy="all"))]
    fn mark<'py>(
        &self,
        py: Python<'py>,
        texts: PyArray,
        policy: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let policy = Policy::parse(policy).map_err(|e| to_py_err(py, e))?;
        let (texts, _) = texts.into_inner();
        let col = texts_col(py, &texts)?;
        let inner = &self.inner;
        let out = run(py, move || {
            let mut b = ListBuilder::new(BooleanBuilder::new());
            for i in 0..col.len() {
                match col.get(i) {
                    Some(t) => {
                        b.values().append_slice(&inner.mark(t, policy));
                        b.append(true);
                    }
                    None => b.append(false),
                }
            }
            Ok(Arc::new(b.finish()) as ArrayRef)
        })?;
        // pyarrow.array() takes the Arrow array through the PyCapsule interface.
        let array = PyArray::from_array_ref(out).into_pyobject(py)?;
        py.import("pyarrow")?.getattr("array")?.call1((array,))
    }

    /// Words in `texts` and how many the `all` and `minimal` policies protect.
    fn counts<'py>(&self, py: Python<'py>, texts: PyArray) -> PyResult<Bound<'py, PyDict>> {
        let (texts, _) = texts.into_inner();
        let col = texts_col(py, &texts)?;
        let inner = &self.inner;
        let (words, all, minimal) = run(py, move || {
            use rayon::prelude::*;
            Ok((0..col.len())
                .into_par_iter()
                .map(|i| {
                    let c = inner.counts(col.get(i).unwrap_or(""));
                    (c.words, c.all, c.minimal)
                })
                .reduce(|| (0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2)))
        })?;
        let d = PyDict::new(py);
        d.set_item("words", words)?;
        d.set_item("all", all)?;
        d.set_item("minimal", minimal)?;
        Ok(d)
    }
}

/// Add this file's classes and functions to `phisieve._core`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyMarker>()?;
    Ok(())
}

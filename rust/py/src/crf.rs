//! `CrfTagger`: linear-chain CRF inference (`phisieve_core::crf`); `CrfWords`: the word
//! columns it builds its attributes from (`phisieve_core::crf_words`).

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef};
use phisieve_core::crf::Exact;
use phisieve_core::crf_words::{Feature, Part, Transform, Words};
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
        let arrays: Vec<ArrayRef> = columns.into_iter().map(|c| c.into_inner().0).collect();
        let cols = arrays
            .iter()
            .map(|a| StrCol::new(a, "attribute column"))
            .collect::<phisieve_core::Result<Vec<_>>>()
            .map_err(|e| to_py_err(py, e))?;
        let counts = int64s(py, per_sequence)?;
        let per_sequence = counts.values().as_ref();
        let tagged = run(py, || self.inner.tag(&cols, per_sequence))?;
        tagged_tuple(py, tagged)
    }

    /// Tag the sequences of `words` with the attributes of `template` (a list of
    /// `(prefix, [(column, transform, offset), ...])`, in the order of `tag`'s columns), as
    /// `tag` would over `words.attributes(template)`, without a string per word. Returns
    /// the best labelling's label numbers (uint32; empty unless `path`), and per position the
    /// probability of a label other than `background` (float64, the sum of their marginals)
    /// and the most likely of them (uint32). `exact`: `(scored_from, thresholds)`, see
    /// `phisieve_core::crf::Exact`.
    #[pyo3(signature = (words, template, background = None, path = true, exact = None))]
    fn tag_words<'py>(
        &self,
        py: Python<'py>,
        words: &CrfWords,
        template: Template,
        background: Option<String>,
        path: bool,
        exact: Option<(f64, Vec<f64>)>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let template = features(py, template)?;
        let background = background.as_deref();
        let exact = exact.map(|(scored_from, thresholds)| Exact {
            scored_from,
            thresholds,
        });
        let found = run(py, || {
            self.inner
                .tag_words(&words.inner, &template, background, path, exact.as_ref())
        })?;
        let labels = to_pyarrow(py, Arc::new(arrow_array::UInt32Array::from(found.labels)))?;
        let p = to_pyarrow(py, Arc::new(arrow_array::Float64Array::from(found.p)))?;
        let best = to_pyarrow(py, Arc::new(arrow_array::UInt32Array::from(found.best)))?;
        PyTuple::new(py, [labels, p, best])
    }
}

/// A template as Python gives it: `(prefix, [(column, transform, offset), ...])` per feature.
type Template = Vec<(String, Vec<(String, String, i64)>)>;

/// A template from Python: `(prefix, [(column, transform, offset), ...])` per feature.
fn features(py: Python<'_>, template: Template) -> PyResult<Vec<Feature>> {
    template
        .into_iter()
        .map(|(prefix, parts)| {
            let parts = parts
                .into_iter()
                .map(|(column, transform, offset)| {
                    Ok(Part {
                        column,
                        transform: Transform::parse(&transform).map_err(|e| to_py_err(py, e))?,
                        offset,
                    })
                })
                .collect::<PyResult<Vec<_>>>()?;
            Ok(Feature { prefix, parts })
        })
        .collect()
}

/// `(labels, marginals)` as pyarrow arrays.
fn tagged_tuple(
    py: Python<'_>,
    tagged: phisieve_core::crf::Tagged,
) -> PyResult<Bound<'_, PyTuple>> {
    let labels = to_pyarrow(py, Arc::new(arrow_array::UInt32Array::from(tagged.labels)))?;
    let marginals = to_pyarrow(
        py,
        Arc::new(arrow_array::Float64Array::from(tagged.marginals)),
    )?;
    PyTuple::new(py, [labels, marginals])
}

/// The words of sequences as interned columns, for `CrfTagger.tag_words`:
/// `phisieve_core::crf_words::Words`.
#[pyclass(frozen, module = "phisieve._core")]
struct CrfWords {
    inner: Words,
}

#[pymethods]
impl CrfWords {
    /// `columns`: `(name, array, null)` (strings, booleans or integers, of one length; `null`
    /// stands for the column's nulls, or `None` to keep them null), laid out as sequences of
    /// `per_sequence` (int64) positions.
    #[new]
    fn new(
        py: Python<'_>,
        columns: Vec<(String, PyArray, Option<String>)>,
        per_sequence: PyArray,
    ) -> PyResult<Self> {
        let columns: Vec<(String, ArrayRef, Option<String>)> = columns
            .into_iter()
            .map(|(name, array, null)| (name, array.into_inner().0, null))
            .collect();
        let counts = int64s(py, per_sequence)?;
        let inner = run(py, || Words::new(&columns, counts.values().as_ref()))?;
        Ok(Self { inner })
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Each feature's attribute at every position (a string array per feature; a null is
    /// no attribute): what `CrfTagger.tag_words` looks up, as strings.
    fn attributes<'py>(
        &self,
        py: Python<'py>,
        template: Template,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let template = features(py, template)?;
        let columns = run(py, || self.inner.attributes(&template))?;
        columns
            .into_iter()
            .map(|c| to_pyarrow(py, Arc::new(arrow_array::StringArray::from(c))))
            .collect()
    }
}

/// An int64 array without nulls (sequence lengths).
fn int64s(py: Python<'_>, array: PyArray) -> PyResult<arrow_array::Int64Array> {
    use arrow_array::types::Int64Type;
    let bad = |m: String| to_py_err(py, CoreError::InvalidArgument(m));
    let counts = array.into_inner().0;
    let counts = counts
        .as_primitive_opt::<Int64Type>()
        .ok_or_else(|| {
            bad(format!(
                "per_sequence must be int64, not {}",
                counts.data_type()
            ))
        })?
        .clone();
    if counts.null_count() > 0 {
        return Err(bad("per_sequence has nulls".to_string()));
    }
    Ok(counts)
}

/// Add this file's classes and functions to `phisieve._core`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CrfTagger>()?;
    m.add_class::<CrfWords>()?;
    Ok(())
}

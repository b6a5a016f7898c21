//! `IndexBuilder`: the patient x term index (`phisieve_core::index`).

use phisieve_core::index::terms_schema;
use phisieve_core::{IndexBuilder, IndexConfig};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3_arrow::{PyArray, PyTable};

use crate::convert::normalizer;
use crate::errors::{run, to_py_err};
use crate::memory::{hold_memory, release_memory};

/// Builds the patient x term index from batches of documents grouped by patient.
#[pyclass(module = "phisieve._core", name = "IndexBuilder")]
struct PyIndexBuilder {
    inner: IndexBuilder,
    holding: bool,
    /// Whether it keeps freed memory (else it purges at once).
    hold: bool,
}

impl PyIndexBuilder {
    fn release(&mut self) {
        if std::mem::take(&mut self.holding) {
            release_memory(self.hold);
        }
    }
}

impl Drop for PyIndexBuilder {
    fn drop(&mut self) {
        self.release();
    }
}

#[pymethods]
impl PyIndexBuilder {
    #[new]
    #[pyo3(signature = (ngram=1, k=2, normalize="nfkc_lower", modulus=1, residue=0, threads=0, hold=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        ngram: usize,
        k: u32,
        normalize: &str,
        modulus: u32,
        residue: u32,
        threads: usize,
        hold: bool,
    ) -> PyResult<Self> {
        let cfg = IndexConfig {
            max_n: ngram,
            k,
            normalizer: normalizer(py, normalize)?,
            modulus,
            residue,
            threads,
        };
        let inner = IndexBuilder::new(cfg).map_err(|e| to_py_err(py, e))?;
        // `hold=False` (under a memory budget): freed memory goes back to the OS at once,
        // which keeps the peak lower at some cost in speed.
        hold_memory(hold);
        Ok(Self {
            inner,
            holding: true,
            hold,
        })
    }

    /// Add one batch: `patient_ids[i]` wrote `texts[i]`.
    fn add(&mut self, py: Python<'_>, patient_ids: PyArray, texts: PyArray) -> PyResult<()> {
        let (pids, _) = patient_ids.into_inner();
        let (texts, _) = texts.into_inner();
        let inner = &mut self.inner;
        run(py, move || inner.add(&pids, &texts))
    }

    /// Approximate bytes of memory the index holds.
    fn memory_bytes(&self) -> usize {
        self.inner.memory_bytes()
    }

    /// Approximate bytes of memory at the index's peak: what it holds and what finishing it
    /// adds (sort order and output batches).
    fn peak_bytes(&self) -> usize {
        self.inner.peak_bytes()
    }

    /// The part of `peak_bytes` that every partition pass holds whole (the vocabularies).
    fn fixed_bytes(&self) -> usize {
        self.inner.fixed_bytes()
    }

    /// Documents, tokens and patients seen so far.
    fn totals<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let t = self.inner.totals();
        let d = PyDict::new(py);
        d.set_item("documents", t.documents)?;
        d.set_item("tokens", t.tokens)?;
        d.set_item("patients", t.patients)?;
        Ok(d)
    }

    /// Every patient id seen, in order of first appearance.
    fn patient_ids(&self) -> Vec<String> {
        self.inner.patient_ids()
    }

    /// Finish the index and return the terms table (a pyarrow Table sorted by n, term).
    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let inner = &mut self.inner;
        let batches = run(py, move || inner.finish());
        self.release();
        PyTable::try_new(batches?, terms_schema())?.into_pyarrow(py)
    }
}

/// Add this file's classes and functions to `phisieve._core`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyIndexBuilder>()?;
    Ok(())
}

//! `phisieve._core`: thin PyO3 bindings over `phisieve-core`.
//!
//! Arrow data arrives zero-copy through the Arrow PyCapsule interface (pyo3-arrow), so any
//! pyarrow, polars or arro3 array works. Every heavy call goes through [`errors::run`], which
//! releases the GIL and maps core errors onto the exception classes of `phisieve.errors`.
//!
//! One file per concept, each with a `register` that adds its classes and functions to the
//! module; `errors`, `convert` and `memory` hold what they share (and the allocator). The
//! type stub `python/phisieve/_core.pyi` is checked against this module by `tests/test_stub.py`.

mod align;
mod convert;
mod crf;
mod errors;
mod hash;
mod index;
mod lists;
mod marker;
mod masking;
mod memory;
mod pack;
mod placeholders;
mod rules;
mod surrogate;
mod tokenizer;
mod words;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::quiet_panics();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    index::register(m)?;
    marker::register(m)?;
    masking::register(m)?;
    lists::register(m)?;
    tokenizer::register(m)?;
    crf::register(m)?;
    pack::register(m)?;
    align::register(m)?;
    placeholders::register(m)?;
    surrogate::register(m)?;
    hash::register(m)?;
    rules::register(m)?;
    words::register(m)?;
    Ok(())
}

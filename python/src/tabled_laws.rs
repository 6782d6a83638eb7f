//! What `check_block_verifier` takes from Rust: the tabled laws, the
//! draft blocks drawn from them, the sampler's arrays, its outputs read
//! and completed (`mdsd::verify::block::TabledLaws`). The loop, which
//! calls the user's sampler, stays in `mdsd/block_check.py`.

use std::borrow::Cow;

use mdsd::verify::block::{DraftBlocks, OutputsRead, TabledLaws};
use mdsd::verify::{VerifyError, seeded_stream};
use numpy::ndarray::{Array1, Array3};
use numpy::{
    IntoPyArray, PyArray1, PyArray3, PyReadonlyArray1, PyReadonlyArray2, PyReadwriteArray4,
};
use pyo3::prelude::*;

use crate::errors::MdsdError;

fn refused(error: impl std::fmt::Display) -> PyErr {
    MdsdError::new_err(error.to_string())
}

/// The target's and the draft's laws after every prefix of up to L
/// tokens, tabled `[Σ_{d ≤ L} V^d, V]` (prefixes of d tokens in the order
/// of their tokens read in base V).
#[pyclass(name = "TabledLaws", module = "mdsd._mdsd", frozen)]
pub(crate) struct PyTabledLaws(TabledLaws);

/// Draft blocks drawn from (or given to) a `TabledLaws`.
#[pyclass(name = "DraftBlocks", module = "mdsd._mdsd", frozen)]
pub(crate) struct PyDraftBlocks(DraftBlocks);

#[pymethods]
impl PyTabledLaws {
    #[new]
    fn new(
        target: PyReadonlyArray2<'_, f64>,
        draft: PyReadonlyArray2<'_, f64>,
        vocab_size: usize,
        depth: usize,
    ) -> PyResult<Self> {
        let rows = |a: PyReadonlyArray2<'_, f64>| a.as_array().iter().copied().collect();
        TabledLaws::new(vocab_size, depth, rows(target), rows(draft))
            .map(Self)
            .map_err(refused)
    }

    /// The same laws with the target's law after no token replaced.
    fn with_root(&self, root: PyReadonlyArray1<'_, f64>) -> PyResult<Self> {
        let root = root.as_array().iter().copied().collect();
        self.0.with_root(root).map(Self).map_err(refused)
    }

    /// The target's law of L + 1 tokens over the V^(L+1) sequences.
    fn target_sequences<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        PyArray1::from_slice(py, self.0.target_sequences())
    }

    /// `count` blocks of `paths` paths from the draft, drawn from stream
    /// `stream` of `seed`.
    fn draw(&self, count: usize, paths: usize, seed: u64, stream: u64) -> PyDraftBlocks {
        let mut rng = seeded_stream(seed, stream);
        PyDraftBlocks(self.0.draw(count, paths, &mut rng))
    }

    /// The blocks of `tokens` `[B, K, L]`.
    fn blocks(&self, tokens: numpy::PyReadonlyArray3<'_, i64>) -> PyResult<PyDraftBlocks> {
        let tokens = tokens.as_array();
        let (count, paths, _) = tokens.dim();
        let flat = tokens
            .iter()
            .map(|&t| usize::try_from(t).map_err(|_| refused(VerifyError::NegativeToken(t))))
            .collect::<PyResult<Vec<usize>>>()?;
        self.0
            .blocks(count, paths, flat)
            .map(PyDraftBlocks)
            .map_err(refused)
    }

    /// Writes `target_probs` `[B, K, L+1, V]` and `draft_probs` `[B, K,
    /// L, V]` for `blocks` into `target` and `draft` (C-contiguous).
    fn fill_arrays(
        &self,
        blocks: &PyDraftBlocks,
        mut target: PyReadwriteArray4<'_, f64>,
        mut draft: PyReadwriteArray4<'_, f64>,
    ) -> PyResult<()> {
        let target = target.as_slice_mut().map_err(refused)?;
        let draft = draft.as_slice_mut().map_err(refused)?;
        self.0
            .fill_arrays(&blocks.0, target, draft)
            .map_err(refused)
    }

    /// The outputs of `name`, the sampler, for `blocks`, read; refuses
    /// an output that breaks the layout.
    fn read(
        &self,
        name: &str,
        outputs: PyReadonlyArray2<'_, i64>,
        blocks: &PyDraftBlocks,
    ) -> PyResult<PyOutputsRead> {
        let outputs = match outputs.as_slice() {
            Ok(slice) => Cow::Borrowed(slice),
            Err(_) => Cow::Owned(outputs.as_array().iter().copied().collect()),
        };
        (self.0.read(name, &outputs, &blocks.0))
            .map(PyOutputsRead)
            .map_err(refused)
    }

    /// Each output read completed to L + 1 tokens by the target, drawn
    /// from stream `stream` of `seed`: the sequences' indices in base V.
    fn complete<'py>(
        &self,
        py: Python<'py>,
        read: &PyOutputsRead,
        seed: u64,
        stream: u64,
    ) -> Bound<'py, PyArray1<i64>> {
        let mut rng = seeded_stream(seed, stream);
        let sequences = self.0.complete(&read.0, &mut rng);
        let sequences: Array1<i64> = sequences.iter().map(|&s| s as i64).collect();
        sequences.into_pyarray(py)
    }
}

/// A batch of outputs read: `lengths` (accepted tokens + 1) and
/// `impossible`, the first output token of target probability 0 after
/// its prefix, or None.
#[pyclass(name = "OutputsRead", module = "mdsd._mdsd", frozen)]
pub(crate) struct PyOutputsRead(OutputsRead);

#[pymethods]
impl PyOutputsRead {
    #[getter]
    fn lengths<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        let lengths: Array1<i64> = self.0.lengths.iter().map(|&l| l as i64).collect();
        lengths.into_pyarray(py)
    }

    #[getter]
    fn impossible(&self) -> Option<String> {
        self.0.impossible.clone()
    }
}

#[pymethods]
impl PyDraftBlocks {
    /// `[B, K, L]` int64.
    #[getter]
    fn tokens<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray3<i64>>> {
        let (b, k) = (self.0.count(), self.0.paths());
        let depth = self.0.tokens().len() / (b * k).max(1);
        let tokens: Vec<i64> = self.0.tokens().iter().map(|&t| t as i64).collect();
        let array = Array3::from_shape_vec((b, k, depth), tokens).map_err(refused)?;
        Ok(array.into_pyarray(py))
    }
}

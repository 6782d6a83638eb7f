//! Target and draft rows over one vocabulary: a draft vocabulary mapped
//! into the target's (EAGLE-3's reduced draft heads), and both sides cut
//! to their first N tokens (models whose logit rows are padded to
//! different lengths), with the probability the cut drops.

use std::path::{Path, PathBuf};

use ndarray_npy::npy::header::Header;

use crate::npy::{npy_descriptor, npy_integers};
use crate::{LogitsError, Matrix, Values};

/// The most probability a cut may drop from any row of either side
/// before [`LogitsError::Truncation`] refuses it (unless allowed).
pub const TRUNCATION_TOLERANCE: f64 = 1e-6;

/// How the draft's vocabulary relates to the target's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VocabularyOptions {
    /// Cut target and draft to their first `cut` tokens.
    pub cut: Option<usize>,
    /// Cut even where more than [`TRUNCATION_TOLERANCE`] is dropped.
    pub allow_truncation: bool,
    /// The draft's tokens as target ids.
    pub draft_map: Option<DraftVocabMap>,
}

/// A file mapping draft token ids to target token ids: a 1-D integer
/// `.npy` with one entry per draft token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraftVocabMap {
    pub path: PathBuf,
    /// Entries are offsets (target id = draft id + entry), as EAGLE-3's
    /// `d2t` tables hold them, rather than target ids.
    pub offsets: bool,
}

/// What a cut dropped: per row, the probability beyond the first
/// `vocabulary` tokens on each side (the most over draft models).
#[derive(Debug, Clone, PartialEq)]
pub struct VocabularyCut {
    pub vocabulary: usize,
    pub target_dropped: Vec<f64>,
    pub draft_dropped: Vec<f64>,
}

impl VocabularyCut {
    /// The most either side lost in any row, with the row.
    pub fn most_dropped(dropped: &[f64]) -> (usize, f64) {
        (dropped.iter().copied().enumerate()).fold((0, 0.0), |best, (row, mass)| {
            if mass > best.1 { (row, mass) } else { best }
        })
    }
}

/// Without a cut or a map, target and draft rows must have one length:
/// checked before anything reads their values.
pub(crate) fn check_vocabularies(
    path: &str,
    target: &Matrix,
    drafts: &[Matrix],
    options: &VocabularyOptions,
) -> Result<(), LogitsError> {
    if options.cut.is_some() || options.draft_map.is_some() {
        return Ok(());
    }
    match drafts.iter().find(|draft| draft.cols() != target.cols()) {
        Some(draft) => Err(LogitsError::VocabMismatch {
            path: path.to_string(),
            target: target.cols(),
            draft: draft.cols(),
        }),
        None => Ok(()),
    }
}

/// Target and draft rows brought to one vocabulary as `options` say: the
/// draft map applied first (draft probability 0, or logit -inf, on target
/// tokens outside it), then the cut; without either, as they are
/// ([`check_vocabularies`] has checked their lengths). Probability rows
/// come renormalised (they were checked at their full length before).
pub(crate) fn aligned(
    target: Matrix,
    drafts: Vec<Matrix>,
    values: Values,
    options: &VocabularyOptions,
) -> Result<(Matrix, Vec<Matrix>, Option<VocabularyCut>), LogitsError> {
    let drafts = match &options.draft_map {
        Some(map) => {
            let ids = read_map(map, target.cols())?;
            (drafts.into_iter())
                .map(|draft| mapped(&map.path, draft, &ids, target.cols(), values))
                .collect::<Result<Vec<_>, _>>()?
        }
        None => drafts,
    };
    let Some(vocabulary) = options.cut else {
        return Ok((target, drafts, None));
    };
    let cut_side = |side: &'static str, matrix: Matrix| {
        cut(side, matrix, vocabulary, values, options.allow_truncation)
    };
    let (target, target_dropped) = cut_side("target", target)?;
    let mut draft_dropped = vec![0.0; target.rows()];
    let drafts = (drafts.into_iter())
        .map(|draft| {
            let (draft, dropped) = cut_side("draft", draft)?;
            for (most, mass) in draft_dropped.iter_mut().zip(dropped) {
                *most = f64::max(*most, mass);
            }
            Ok(draft)
        })
        .collect::<Result<Vec<_>, LogitsError>>()?;
    let cut = VocabularyCut {
        vocabulary,
        target_dropped,
        draft_dropped,
    };
    Ok((target, drafts, Some(cut)))
}

/// The first `vocabulary` columns of every row and the probability each
/// row had beyond them; probability rows renormalised to the kept tokens.
fn cut(
    side: &'static str,
    matrix: Matrix,
    vocabulary: usize,
    values: Values,
    allow_truncation: bool,
) -> Result<(Matrix, Vec<f64>), LogitsError> {
    if vocabulary == 0 || vocabulary > matrix.cols() {
        return Err(LogitsError::VocabularyCut {
            side,
            vocabulary,
            available: matrix.cols(),
        });
    }
    let mut data = Vec::with_capacity(matrix.rows() * vocabulary);
    let mut dropped = Vec::with_capacity(matrix.rows());
    for (row, values_of_row) in matrix.iter_rows().enumerate() {
        let (kept, beyond) = values_of_row.split_at(vocabulary);
        let (kept_weight, beyond_weight) = match values {
            Values::Probabilities => (kept.iter().sum::<f64>(), beyond.iter().sum::<f64>()),
            // Softmax weights relative to the row's largest logit: the
            // largest weight is 1, so neither sum overflows or is lost.
            Values::Logits => {
                let max = values_of_row
                    .iter()
                    .copied()
                    .fold(f64::NEG_INFINITY, f64::max);
                let weight = |x: &[f64]| x.iter().map(|l| (l - max).exp()).sum::<f64>();
                (weight(kept), weight(beyond))
            }
        };
        // NaN (a NaN logit) is left to the softmax, which names its index.
        if kept_weight == 0.0 {
            return Err(LogitsError::NothingKept {
                side,
                row,
                vocabulary,
            });
        }
        let mass = beyond_weight / (kept_weight + beyond_weight);
        if mass > TRUNCATION_TOLERANCE && !allow_truncation {
            return Err(LogitsError::Truncation {
                side,
                row,
                mass,
                vocabulary,
            });
        }
        dropped.push(mass);
        match values {
            Values::Probabilities => data.extend(kept.iter().map(|x| x / kept_weight)),
            Values::Logits => data.extend_from_slice(kept),
        }
    }
    Ok((Matrix::new(matrix.rows(), vocabulary, data)?, dropped))
}

/// Draft rows over the target's `vocabulary`: column j of `draft` moved
/// to column `ids[j]`, every other column probability 0 (logit -inf).
fn mapped(
    path: &Path,
    draft: Matrix,
    ids: &[usize],
    vocabulary: usize,
    values: Values,
) -> Result<Matrix, LogitsError> {
    if draft.cols() != ids.len() {
        return Err(LogitsError::VocabMap {
            path: path.display().to_string(),
            message: format!(
                "it maps {} draft tokens but the draft rows have {}",
                ids.len(),
                draft.cols()
            ),
        });
    }
    let absent = match values {
        Values::Probabilities => 0.0,
        Values::Logits => f64::NEG_INFINITY,
    };
    let mut data = vec![absent; draft.rows() * vocabulary];
    for (row, out) in draft.iter_rows().zip(data.chunks_exact_mut(vocabulary)) {
        for (&id, &value) in ids.iter().zip(row) {
            out[id] = value;
        }
    }
    Matrix::new(draft.rows(), vocabulary, data)
}

/// The map's target ids, checked: one per draft token, each below the
/// target's `vocabulary`, no two equal.
fn read_map(map: &DraftVocabMap, vocabulary: usize) -> Result<Vec<usize>, LogitsError> {
    let shown = map.path.display().to_string();
    let error = |message: String| LogitsError::VocabMap {
        path: shown.clone(),
        message,
    };
    let bytes = crate::files::read(&map.path)?;
    let header = Header::from_reader(&mut std::io::Cursor::new(&bytes))
        .map_err(|e| error(format!("not a .npy file: {e}")))?;
    if header.shape.len() != 1 {
        return Err(error(format!(
            "it has shape {:?}; expected a 1-D array of target ids",
            header.shape
        )));
    }
    let descriptor = npy_descriptor(&header);
    let entries = match descriptor.get(1..) {
        Some("i8" | "i4" | "u8" | "u4") => npy_integers(&bytes, "map", &shown)
            .map(|(_, entries)| entries)
            .map_err(|e| error(e.to_string()))?,
        _ => {
            return Err(error(format!(
                "it has dtype {descriptor}; expected int32, int64, uint32 or uint64"
            )));
        }
    };
    // Offsets read as ids repeat and go negative: say what they may be.
    let hint = if map.offsets {
        ""
    } else {
        " (EAGLE-3's d2t holds offsets, target id = draft id + d2t[draft id]: \
         pass --draft-vocab-map-offsets)"
    };
    let mut owner = vec![None; vocabulary];
    let mut ids = Vec::with_capacity(entries.len());
    for (draft_id, entry) in entries.into_iter().enumerate() {
        let id = if map.offsets {
            entry + draft_id as i128
        } else {
            entry
        };
        let Some(id) = usize::try_from(id).ok().filter(|&id| id < vocabulary) else {
            return Err(error(format!(
                "draft token {draft_id} maps to target id {id}, outside the target's \
                 {vocabulary} tokens{hint}"
            )));
        };
        if let Some(first) = owner[id].replace(draft_id) {
            return Err(error(format!(
                "draft tokens {first} and {draft_id} both map to target id {id}{hint}"
            )));
        }
        ids.push(id);
    }
    Ok(ids)
}

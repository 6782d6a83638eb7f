//! Rows of numbers and what they hold.

use std::ops::Range;

use mdsd_core::{CoreError, Distribution, PositionalRows, Transform};

use crate::{LogitsError, VocabularyCut};

/// Row-major rows of equal length, in f64 whatever the file held.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    rows: usize,
    cols: usize,
    data: Vec<f64>,
}

impl Matrix {
    /// `rows x cols` values, row after row.
    pub fn new(rows: usize, cols: usize, data: Vec<f64>) -> Result<Self, LogitsError> {
        if rows.checked_mul(cols) != Some(data.len()) {
            return Err(LogitsError::BatchShape {
                what: "the data",
                expected: format!("{rows} x {cols} values"),
                found: format!("{} values", data.len()),
            });
        }
        Ok(Self { rows, cols, data })
    }

    /// Rows of equal length.
    pub fn from_rows(rows: &[Vec<f64>]) -> Result<Self, LogitsError> {
        let cols = rows.first().map_or(0, Vec::len);
        if let Some((r, row)) = rows.iter().enumerate().find(|(_, row)| row.len() != cols) {
            return Err(LogitsError::BatchShape {
                what: "a row",
                expected: format!("{cols} values (as row 0)"),
                found: format!("{} values in row {r}", row.len()),
            });
        }
        Ok(Self {
            rows: rows.len(),
            cols,
            data: rows.concat(),
        })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    pub fn row(&self, r: usize) -> &[f64] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// The rows in order (none for a matrix without columns).
    pub fn iter_rows(&self) -> impl ExactSizeIterator<Item = &[f64]> {
        self.data.chunks_exact(self.cols.max(1)).take(self.rows)
    }

    /// All values, row after row.
    /// The entries, row after row, given up.
    pub(crate) fn into_data(self) -> Vec<f64> {
        self.data
    }

    pub fn as_slice(&self) -> &[f64] {
        &self.data
    }

    /// Rows `rows` (within range) as a matrix of their own.
    fn slice(&self, rows: Range<usize>) -> Self {
        Self {
            rows: rows.len(),
            cols: self.cols,
            data: self.data[rows.start * self.cols..rows.end * self.cols].to_vec(),
        }
    }

    /// This matrix's rows and then `below`'s (the same columns).
    pub fn stacked(&self, below: &Matrix) -> Result<Matrix, LogitsError> {
        let mut data = Vec::with_capacity(self.data.len() + below.data.len());
        data.extend_from_slice(&self.data);
        data.extend_from_slice(&below.data);
        Matrix::new(self.rows + below.rows, self.cols, data)
    }

    /// The matrix with `rows` rows, a single row repeated (an argument
    /// given once is shared by every row of the others).
    pub(crate) fn broadcast(self, rows: usize) -> Self {
        if self.rows == rows || self.rows != 1 {
            return self;
        }
        Self {
            rows,
            cols: self.cols,
            data: self.data.repeat(rows),
        }
    }
}

/// What a file's rows hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Values {
    /// Probability vectors (renormalised in f64 when read).
    Probabilities,
    /// Unnormalised log-probabilities, turned into probabilities by a
    /// stable softmax.
    Logits,
}

impl Values {
    /// One row as a distribution after `transform`: probabilities
    /// renormalised in f64, logits through mdsd-core's stable softmax.
    pub fn distribution(
        self,
        row: &[f64],
        transform: &Transform,
    ) -> Result<Distribution, CoreError> {
        match self {
            // Without a transform the row is the law itself: no copy of it.
            Values::Probabilities if transform.is_identity() => Distribution::from_probs(row),
            Values::Probabilities => {
                Distribution::from_probs(row).and_then(|d| transform.apply(&d))
            }
            Values::Logits => transform.apply_to_logits(row),
        }
    }
}

/// How a file laid out its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One column per token of the vocabulary.
    Dense,
    /// The `kept` tokens of largest max(p, q) per row, then one lumped tail
    /// symbol holding the mass of all the others (`../shared/data`'s sparse
    /// format). Lumping coarsens, so acceptances on such rows are at least
    /// the full-vocabulary ones.
    SparseWithTail {
        kept: usize,
        /// The full vocabulary's size, when the file says.
        vocabulary: Option<usize>,
    },
}

/// Target and draft rows: row r of each is one decoding step.
#[derive(Debug, Clone, PartialEq)]
pub struct Pairs {
    pub target: Matrix,
    /// The draft rows (of the first draft model, for independent drafts).
    pub draft: Matrix,
    /// The rows of draft models 2..n, for independent drafts (empty
    /// otherwise).
    pub more_drafts: Vec<Matrix>,
    pub values: Values,
    pub layout: Layout,
    /// The shape of the target's array as stored (leading axes, then the
    /// vocabulary); its rows are the product of the leading axes.
    pub shape: Vec<usize>,
    /// What `--vocab` cut off each row, when it was given.
    pub cut: Option<VocabularyCut>,
    /// Where the rows came from, for messages.
    pub source: String,
}

/// Which rows of a file to use: `count` rows from row `first` (all the
/// rest when `count` is `None`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowSelection {
    pub first: usize,
    pub count: Option<usize>,
}

impl RowSelection {
    /// The rows selected out of `available` in the file `source`; an
    /// empty selection, or one past the end, is an error.
    pub fn range(&self, available: usize, source: &str) -> Result<Range<usize>, LogitsError> {
        let end = (self.count).map_or(Some(available), |count| self.first.checked_add(count));
        match end {
            Some(end) if self.first < end && end <= available => Ok(self.first..end),
            _ => Err(LogitsError::RowRange {
                path: source.to_string(),
                rows: self.first..end.unwrap_or(usize::MAX),
                available,
            }),
        }
    }
}

impl Pairs {
    pub fn rows(&self) -> usize {
        self.target.rows()
    }

    /// The first `rows` rows (all when there are fewer).
    pub fn head(&self, rows: usize) -> Self {
        self.slice(0..rows.min(self.rows()))
    }

    /// The rows of `pieces` one after another (windows of one file, read
    /// in turn); the first piece's source, values and layout.
    pub fn concatenate(pieces: Vec<Pairs>) -> Result<Pairs, LogitsError> {
        let mut pieces = pieces.into_iter();
        let Some(mut all) = pieces.next() else {
            return Err(LogitsError::Format {
                path: String::new(),
                format: "rows",
                message: "no rows to join".into(),
            });
        };
        for piece in pieces {
            all.target = all.target.stacked(&piece.target)?;
            all.draft = all.draft.stacked(&piece.draft)?;
            if let (Some(cut), Some(more)) = (&mut all.cut, &piece.cut) {
                cut.target_dropped.extend(&more.target_dropped);
                cut.draft_dropped.extend(&more.draft_dropped);
            }
        }
        Ok(all)
    }

    /// Rows `rows` (within range) and what the cut dropped from them.
    fn slice(&self, rows: Range<usize>) -> Self {
        let keep = |m: &Matrix| m.slice(rows.clone());
        let cut = self.cut.as_ref().map(|cut| VocabularyCut {
            vocabulary: cut.vocabulary,
            target_dropped: cut.target_dropped[rows.clone()].to_vec(),
            draft_dropped: cut.draft_dropped[rows.clone()].to_vec(),
        });
        Self {
            target: keep(&self.target),
            draft: keep(&self.draft),
            more_drafts: self.more_drafts.iter().map(keep).collect(),
            values: self.values,
            layout: self.layout,
            shape: self.shape.clone(),
            cut,
            source: self.source.clone(),
        }
    }

    /// The selected rows; a selection that starts past the last row, or
    /// asks for more rows than there are, is an error naming the count.
    pub fn select(&self, selection: RowSelection) -> Result<Self, LogitsError> {
        Ok(self.slice(selection.range(self.rows(), &self.source)?))
    }

    /// Rows `rows` as a context model whose laws depend on the position
    /// only: after d tokens, row `rows.start + d` of target and draft. The
    /// adapter that lets block verification run over a logit dump (DESIGN
    /// §6); a model backend would supply real prefix-dependent laws instead.
    pub fn context_model(
        &self,
        rows: Range<usize>,
        transform: &Transform,
    ) -> Result<PositionalRows, LogitsError> {
        if rows.is_empty() || rows.end > self.rows() {
            return Err(LogitsError::RowRange {
                path: self.source.clone(),
                rows,
                available: self.rows(),
            });
        }
        let laws = |what: &'static str, m: &Matrix| {
            rows.clone()
                .map(|r| {
                    self.values
                        .distribution(m.row(r), transform)
                        .map_err(|source| LogitsError::InvalidRow {
                            what,
                            row: r,
                            source,
                        })
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let model = PositionalRows::new(laws("target", &self.target)?, laws("draft", &self.draft)?);
        model.map_err(|source| LogitsError::InvalidRow {
            what: "target and draft",
            row: rows.start,
            source,
        })
    }
}

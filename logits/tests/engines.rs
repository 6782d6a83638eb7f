//! Inputs as serving engines and Hugging Face write them
//! (`logits/tests/fixtures/engines/`, written by numpy through
//! `scripts/make_fixtures.py`): `[batch, positions, V]` arrays, padded
//! vocabularies cut with `--vocab`, and EAGLE-3 draft vocabularies mapped
//! into the target's.

use std::path::{Path, PathBuf};

use ndarray::Array1;
use ndarray_npy::WriteNpyExt;

use mdsd_logits::{
    DraftVocabMap, LogitsError, Pairs, ReadOptions, Values, VocabularyOptions, read_pairs,
};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/engines")
        .join(name)
}

fn read(name: &str, vocabulary: VocabularyOptions) -> Result<Pairs, LogitsError> {
    let options = ReadOptions {
        values: None,
        vocabulary,
        draft_arrays: Vec::new(),
    };
    read_pairs(fixture(name), &options)
}

fn cut(vocabulary: usize, allow_truncation: bool) -> VocabularyOptions {
    VocabularyOptions {
        cut: Some(vocabulary),
        allow_truncation,
        draft_map: None,
    }
}

fn mapped(path: PathBuf, offsets: bool) -> VocabularyOptions {
    VocabularyOptions {
        draft_map: Some(DraftVocabMap { path, offsets }),
        ..VocabularyOptions::default()
    }
}

#[test]
fn leading_axes_are_rows_in_c_order() {
    let pairs = read("hf-logits.npz", VocabularyOptions::default()).unwrap();
    assert_eq!(pairs.shape, [2, 4, 12]);
    assert_eq!((pairs.rows(), pairs.target.cols()), (8, 12));
    assert_eq!(pairs.values, Values::Logits);
    // The padded file holds the same target rows as a [8, 16] array.
    let padded = read("padded.npz", cut(12, false)).unwrap();
    assert_eq!(padded.shape, [8, 16]);
    assert_eq!(padded.target, pairs.target);
    assert_eq!(padded.draft, pairs.draft);
}

#[test]
fn padded_vocabularies_need_a_cut_that_drops_nothing() {
    let err = read("padded.npz", VocabularyOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            LogitsError::VocabMismatch {
                target: 16,
                draft: 12,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("--vocab N"), "{err}");
    // Padding at -inf holds no probability: the cut drops exactly 0.
    let pairs = read("padded.npz", cut(12, false)).unwrap();
    let dropped = pairs.cut.as_ref().unwrap();
    assert!(dropped.target_dropped.iter().all(|&m| m == 0.0));
    assert!(dropped.draft_dropped.iter().all(|&m| m == 0.0));

    // Padding at logit 0 holds mass: refused, naming the side and row,
    // unless truncation is allowed; then the mass dropped is reported.
    let err = read("padded-heavy.npz", cut(12, false)).unwrap_err();
    assert!(
        matches!(err, LogitsError::Truncation { side: "target", row: 0, vocabulary: 12, mass } if mass > 1e-6),
        "{err}"
    );
    assert!(err.to_string().contains("--allow-truncation"), "{err}");
    let pairs = read("padded-heavy.npz", cut(12, true)).unwrap();
    let full = read("padded-heavy.npz", VocabularyOptions::default());
    assert!(full.is_err(), "the uncut pair has two vocabularies");
    let dropped = &pairs.cut.as_ref().unwrap().target_dropped;
    for (r, row) in pairs.target.iter_rows().enumerate() {
        // Four padding logits of 0 against the row's own: e^0 each.
        let kept: f64 = row.iter().map(|l| l.exp()).sum();
        let want = 4.0 / (kept + 4.0);
        assert!((dropped[r] - want).abs() < 1e-12, "row {r}: {}", dropped[r]);
    }
    // Cuts outside the rows are refused by size.
    let err = read("padded.npz", cut(13, false)).unwrap_err();
    assert!(
        matches!(
            err,
            LogitsError::VocabularyCut {
                side: "draft",
                vocabulary: 13,
                available: 12
            }
        ),
        "{err}"
    );
}

#[test]
fn probability_rows_cut_are_renormalised_with_the_mass_reported() {
    let dir = tempfile::tempdir().unwrap();
    let p = ndarray::arr2(&[[0.5, 0.3, 0.2], [0.6, 0.4, 0.0]]);
    let q = ndarray::arr2(&[[0.25, 0.25, 0.5], [0.5, 0.5, 0.0]]);
    p.write_npy(std::fs::File::create(dir.path().join("p_target.npy")).unwrap())
        .unwrap();
    q.write_npy(std::fs::File::create(dir.path().join("q_draft.npy")).unwrap())
        .unwrap();
    let options = ReadOptions {
        values: None,
        vocabulary: cut(2, true),
        ..ReadOptions::default()
    };
    let pairs = read_pairs(dir.path(), &options).unwrap();
    assert_eq!(pairs.target.row(0), [0.5 / 0.8, 0.3 / 0.8]);
    assert_eq!(pairs.draft.row(1), [0.5, 0.5]);
    let dropped = pairs.cut.unwrap();
    assert_eq!(dropped.target_dropped, [0.2, 0.0]);
    assert_eq!(dropped.draft_dropped, [0.5, 0.0]);
}

#[test]
fn a_draft_vocabulary_map_places_the_draft_on_target_ids() {
    let expanded = read("eagle-expanded.npz", VocabularyOptions::default()).unwrap();
    for (map, offsets) in [("draft-ids.npy", false), ("d2t.npy", true)] {
        let pairs = read("eagle.npz", mapped(fixture(map), offsets)).unwrap();
        assert_eq!(pairs.draft, expanded.draft, "{map}");
        assert_eq!(pairs.target, expanded.target, "{map}");
    }
    // Offsets read as ids: negative or repeated ids, with the hint.
    let err = read("eagle.npz", mapped(fixture("d2t.npy"), false)).unwrap_err();
    assert!(
        err.to_string().contains("--draft-vocab-map-offsets"),
        "{err}"
    );
}

#[test]
fn bad_maps_are_refused_naming_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, ids: &[i64]| {
        let path = dir.path().join(name);
        Array1::from(ids.to_vec())
            .write_npy(std::fs::File::create(&path).unwrap())
            .unwrap();
        path
    };
    let cases = [
        (
            write("short.npy", &[0, 1, 2]),
            "maps 3 draft tokens but the draft rows have 5",
        ),
        (
            write("outside.npy", &[0, 1, 2, 12, 4]),
            "draft token 3 maps to target id 12, outside the target's 12 tokens",
        ),
        (
            write("twice.npy", &[0, 1, 2, 1, 4]),
            "draft tokens 1 and 3 both map to target id 1",
        ),
    ];
    for (path, message) in cases {
        let err = read("eagle.npz", mapped(path, false)).unwrap_err();
        assert!(matches!(err, LogitsError::VocabMap { .. }), "{err}");
        assert!(err.to_string().contains(message), "{err}");
    }
    let floats = dir.path().join("floats.npy");
    Array1::from(vec![0.0f64; 5])
        .write_npy(std::fs::File::create(&floats).unwrap())
        .unwrap();
    let err = read("eagle.npz", mapped(floats, false)).unwrap_err();
    assert!(err.to_string().contains("expected int32, int64"), "{err}");
}

#[test]
fn the_sparse_format_takes_no_cut_or_map() {
    let sparse = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sparse.safetensors");
    let options = ReadOptions {
        values: None,
        vocabulary: cut(2, true),
        ..ReadOptions::default()
    };
    let err = read_pairs(sparse, &options).unwrap_err();
    assert!(err.to_string().contains("--vocab"), "{err}");
}

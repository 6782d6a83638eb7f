//! Draft trees: how a drafter lays out its tokens for one target call
//! (`docs/blocks.md`). A drawn tree is held as its root-to-leaf paths, in
//! the order the tree was drawn (depth first, children in draw order), so
//! that K i.i.d. paths and static trees share one representation.
//!
//! * [`DraftShape::Paths`]: K i.i.d. paths of L tokens (SpecTr, the K-path
//!   LP). The drafts at a node are the next tokens of the paths through it:
//!   m i.i.d. draws from q(. | node), m the number of those paths.
//! * [`DraftShape::Tree`]: a static tree (Sequoia, EAGLE): every node of
//!   depth d gets `branching[d]` children, drawn i.i.d., without
//!   replacement, or as the draft's top-k. A node drawn twice (i.i.d.
//!   children) is one node whose children are the union of both draws':
//!   still i.i.d. given the node, and the drafts at it are counted with
//!   multiplicity.

use crate::{
    ContextModel, CoreError, DraftScheme, Instead, Method, SchemeKind, check_depth, saturating_pow,
};

/// How the draft tree of a block is drawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DraftShape {
    /// K i.i.d. draft paths (K >= 1).
    Paths(usize),
    /// A static tree: `branching[d]` children per node of depth d (each at
    /// least 1; the tree's depth is `branching.len()`), drawn by `children`
    /// (i.i.d., without replacement, or top-k; a node whose draft law has
    /// fewer tokens than its branching gets all of them, without replacement
    /// or top-k).
    Tree {
        branching: Vec<usize>,
        children: SchemeKind,
    },
}

/// The child schemes a static tree takes.
pub const TREE_CHILD_SCHEMES: [SchemeKind; 3] = [
    SchemeKind::Iid,
    SchemeKind::WithoutReplacement,
    SchemeKind::Top,
];

impl DraftShape {
    /// K i.i.d. paths.
    pub fn paths(count: usize) -> Result<Self, CoreError> {
        if count == 0 {
            return Err(CoreError::NoDrafts);
        }
        Ok(Self::Paths(count))
    }

    /// A static tree of the given branching per depth and child scheme.
    pub fn tree(branching: Vec<usize>, children: SchemeKind) -> Result<Self, CoreError> {
        if branching.is_empty() {
            return Err(CoreError::ZeroDepth);
        }
        if let Some(&b) = branching.iter().find(|&&b| b == 0) {
            return Err(CoreError::InvalidSetting {
                setting: "tree branching",
                value: b.to_string(),
                expected: "at least 1 child per node at every depth",
            });
        }
        if !TREE_CHILD_SCHEMES.contains(&children) {
            return Err(CoreError::InvalidSetting {
                setting: "tree children",
                value: children.name().into(),
                expected: "iid, wor or top",
            });
        }
        Ok(Self::Tree {
            branching,
            children,
        })
    }

    /// The scheme of the drafts at every node.
    pub fn node_scheme(&self) -> SchemeKind {
        match self {
            Self::Paths(_) => SchemeKind::Iid,
            Self::Tree { children, .. } => *children,
        }
    }

    /// Whether the first path of a drawn tree is a draw from the draft's
    /// law of paths (false for top-k children, which are not drawn).
    pub fn first_path_is_drawn(&self) -> bool {
        self.node_scheme() != SchemeKind::Top
    }

    /// For a block of `depth` tokens: a tree's depth must be its
    /// branching's length.
    pub fn check_depth(&self, depth: usize) -> Result<(), CoreError> {
        match self {
            Self::Tree { branching, .. } if branching.len() != depth => {
                Err(CoreError::InvalidSetting {
                    setting: "tree branching",
                    value: format!("{} depths", branching.len()),
                    expected: "one branching factor per draft depth (as many as the depth L)",
                })
            }
            _ => Ok(()),
        }
    }

    /// Root-to-leaf paths in a drawn tree of `depth` (saturating): K, or
    /// the product of the branching factors.
    pub fn leaves(&self) -> u128 {
        match self {
            Self::Paths(k) => *k as u128,
            Self::Tree { branching, .. } => branching
                .iter()
                .fold(1u128, |n, &b| n.saturating_mul(b as u128)),
        }
    }

    /// The drafts at the node of depth `d` that the paths `alive` (indices
    /// into `paths`, in order) pass through, in draw order. I.i.d. paths:
    /// each path's next token. I.i.d. children: one per child slot, with
    /// multiplicity (each slot's leaves are contiguous, as many as the
    /// branching below it). Children without replacement or top-k: the
    /// distinct next tokens (their subtrees may be smaller where a draft law
    /// has fewer tokens than the branching).
    pub fn node_drafts(&self, paths: &[Vec<usize>], alive: &[usize], d: usize) -> Vec<usize> {
        match self {
            Self::Paths(_) => alive.iter().map(|&i| paths[i][d]).collect(),
            Self::Tree {
                branching,
                children: SchemeKind::Iid,
            } => {
                let slot: usize = branching[d + 1..].iter().product();
                alive
                    .iter()
                    .step_by(slot.max(1))
                    .map(|&i| paths[i][d])
                    .collect()
            }
            Self::Tree { .. } => {
                let mut drafts: Vec<usize> = Vec::new();
                for &i in alive {
                    if drafts.last() != Some(&paths[i][d]) {
                        drafts.push(paths[i][d]);
                    }
                }
                drafts
            }
        }
    }

    /// Whether a drawn tree of this shape may hold `count` paths: exactly
    /// K, or the product of the branching for i.i.d. children; at most that
    /// where children are distinct (a law may have fewer tokens).
    pub fn holds_paths(&self, count: usize) -> bool {
        let count = count as u128;
        match self {
            Self::Paths(_) => count >= 1,
            Self::Tree {
                children: SchemeKind::Iid,
                ..
            } => count == self.leaves(),
            Self::Tree { .. } => count >= 1 && count <= self.leaves(),
        }
    }

    /// The draft scheme of the children of a node with draft law `q` at
    /// depth `d` of a static tree (`None` for i.i.d. paths).
    pub fn node_children(
        &self,
        q: &crate::Distribution,
        d: usize,
    ) -> Result<Option<DraftScheme>, CoreError> {
        let Self::Tree {
            branching,
            children,
        } = self
        else {
            return Ok(None);
        };
        let mut n = branching[d];
        if *children != SchemeKind::Iid {
            n = n.min(q.support_size());
        }
        DraftScheme::new(*children, vec![q.clone()], n).map(Some)
    }

    /// Every tree of a block of `depth` tokens with its probability, each
    /// as its root-to-leaf paths: ordered K-tuples of paths, or static
    /// trees with their children in draw order. Refuses past `limit` trees
    /// (or paths in one) before enumerating.
    #[allow(clippy::type_complexity)]
    pub fn enumerate(
        &self,
        model: &dyn ContextModel,
        depth: usize,
        limit: usize,
    ) -> Result<Vec<(Vec<Vec<usize>>, f64)>, CoreError> {
        check_depth(model, depth)?;
        self.check_depth(depth)?;
        let too_large = |what, size| CoreError::TooLarge {
            what,
            size,
            limit: limit as u128,
            instead: Instead(&[Method::Sampling]),
        };
        let v = model.vocab_size() as u128;
        if self.leaves() > limit as u128 {
            return Err(too_large("the set of a draft tree's paths", self.leaves()));
        }
        match self {
            Self::Paths(k) => {
                let drafts = crate::draft_paths(model, depth);
                let tuples = saturating_pow(drafts.len() as u128, *k);
                if tuples > limit as u128 {
                    return Err(too_large("the set of draft path tuples", tuples));
                }
                let mut out = Vec::with_capacity(tuples as usize);
                let mut index = vec![0; *k];
                loop {
                    out.push((
                        index.iter().map(|&i| drafts[i].0.clone()).collect(),
                        index.iter().map(|&i| drafts[i].1).product(),
                    ));
                    match index.iter().rposition(|&i| i + 1 < drafts.len()) {
                        Some(j) => {
                            index[j] += 1;
                            index[j + 1..].iter_mut().for_each(|i| *i = 0);
                        }
                        None => return Ok(out),
                    }
                }
            }
            Self::Tree { branching, .. } => {
                // Trees of a subtree of depth d: at most V^b (children)
                // times the subtrees' counts to the power b.
                let mut count = 1u128;
                for &b in branching.iter().rev() {
                    count = saturating_pow(v, b).saturating_mul(saturating_pow(count, b));
                }
                if count > limit as u128 {
                    return Err(too_large("the set of draft trees", count));
                }
                self.subtrees(model, &mut Vec::new(), limit)
            }
        }
    }

    /// The subtrees below `prefix` with their probabilities.
    #[allow(clippy::type_complexity)]
    fn subtrees(
        &self,
        model: &dyn ContextModel,
        prefix: &mut Vec<usize>,
        limit: usize,
    ) -> Result<Vec<(Vec<Vec<usize>>, f64)>, CoreError> {
        let d = prefix.len();
        let Self::Tree { branching, .. } = self else {
            unreachable!("subtrees of a static tree only")
        };
        if d == branching.len() {
            return Ok(vec![(vec![prefix.clone()], 1.0)]);
        }
        let q = model.draft(model.context(prefix));
        let scheme = self
            .node_children(q, d)?
            .expect("a static tree has a child scheme");
        let law = scheme.tuple_law(limit)?;
        let mut out = Vec::new();
        for (children, &prob) in law.outcomes.iter().zip(&law.probs) {
            // The product of the children's subtrees, in order.
            let mut trees: Vec<(Vec<Vec<usize>>, f64)> = vec![(Vec::new(), prob)];
            for &child in children {
                prefix.push(child);
                let below = self.subtrees(model, prefix, limit)?;
                prefix.pop();
                trees = trees
                    .into_iter()
                    .flat_map(|(paths, p)| {
                        below.iter().map(move |(more, w)| {
                            let mut all = paths.clone();
                            all.extend(more.iter().cloned());
                            (all, p * w)
                        })
                    })
                    .collect();
            }
            out.extend(trees);
        }
        Ok(out)
    }

    /// A short description for tables: `2 paths`, `tree 4,2 (wor)`.
    pub fn describe(&self) -> String {
        match self {
            Self::Paths(1) => "1 path".into(),
            Self::Paths(k) => format!("{k} paths"),
            Self::Tree {
                branching,
                children,
            } => format!(
                "tree {} ({})",
                branching
                    .iter()
                    .map(|b| b.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
                children.name()
            ),
        }
    }
}

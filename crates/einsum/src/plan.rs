//! [`Plan`]: a contraction decided before any data exists, the one value between an
//! expression and its graph. It holds the resolved network (numbered labels), the label
//! sizes, the one-operand sums done first, the path and its followed pairwise steps, the
//! sliced labels (possibly none) and the memory budget. [`crate::Einsum`],
//! [`crate::SlicePlan`], [`crate::SlicedEinsum`] and their gradients take it; nothing
//! after it parses the expression again.
//!
//! Input: an expression and operand shapes ([`Plan::new`], parsed once by
//! [`Subscripts::parse`]), or an already numbered network ([`Plan::from_network`], no
//! string at all), with a [`PathChoice`] and a [`MemoryLimit`].
//!
//! Stops, in order:
//! 1. resolve: labels numbered, ellipses expanded, broadcast axes given size-1 labels of
//!    their own ([`LabelledNetwork::squeeze_broadcast`]);
//! 2. sums first: in a network of two or more operands, a label of size > 1 that only one
//!    operand holds and the output does not is summed out of that operand before any
//!    pairwise step (a one-operand einsum, [`crate::UnarySpec`]); `ij,kl->` is then two
//!    sums and a product of scalars, not an outer product of `n⁴` entries summed away;
//! 3. path: the explicit path as given, or [`crate::search::find_path_until`]'s on the
//!    network left by the sums (so the search sees the cheaper network, and every finder
//!    of `search` serves);
//! 4. walk: the path followed over that network ([`FollowedPath`]).
//!
//! A sliced plan ([`Plan::slice`]) is derived from a plan by dropping labels from the
//! resolved network and the shapes, and following the same path again; no string is
//! printed or parsed.
//!
//! Invariants:
//! - `reduced[i]` is `inputs[i]` unless operand `i` is summed first, and then it is the
//!   distinct labels of `inputs[i]` that another operand or the output holds, in order;
//! - the path is valid for `inputs.len()` operands and the walk follows it over `reduced`;
//! - [`Plan::multiply_adds`] is the cost model of [`crate::search::path_cost`] and of
//!   [`crate::Einsum::multiply_adds`]: each first sum's loops, each pairwise step's loops
//!   and the final reduction's.
//!
//! Complexity: resolving and the sums are linear in the labels; the walk is the
//! follower's (`O(n log n)` for `n` operands plus the labels per step); the search is the
//! finder's.

use crate::error::{EinsumError, EinsumResult};
use crate::memory::MemoryLimit;
use crate::path::{ContractionPath, FollowedPath, PathChoice, Walk};
use crate::subscripts::{LabelledNetwork, Subscripts};

/// A contraction planned for fixed shapes: network, sums done first, path, walk, slicing
/// and memory budget (see the module docs).
///
/// ```
/// use einsum::{Einsum, MemoryLimit, PathChoice, Plan};
///
/// let shapes = [vec![2, 3], vec![3, 4], vec![4, 5]];
/// let plan = Plan::new("ij,jk,kl->il", &shapes, PathChoice::Greedy, MemoryLimit::default()).unwrap();
/// assert_eq!(plan.network().inputs, vec![vec![0, 1], vec![1, 2], vec![2, 3]]);
/// assert_eq!(plan.steps().len(), 2);
/// // The same network without a string, as the interleaved form gives it.
/// let same = Plan::from_network(
///     vec![vec![0, 1], vec![1, 2], vec![2, 3]], vec![0, 3], vec![2, 3, 4, 5],
///     PathChoice::Greedy, MemoryLimit::default(),
/// ).unwrap();
/// assert_eq!((same.path(), same.multiply_adds()), (plan.path(), plan.multiply_adds()));
/// // Either compiles without parsing again.
/// let e = Einsum::<f64>::from_plan(plan).unwrap();
/// assert_eq!(e.output_shape(), &[2, 5]);
///
/// // A label held by one operand alone is summed out of it first.
/// let p = Plan::new("ij,kl->", &[vec![300, 300], vec![300, 300]], PathChoice::Greedy, MemoryLimit::default()).unwrap();
/// assert_eq!(p.multiply_adds(), 2.0 * 90_000.0 + 1.0);
/// ```
///
/// It serializes (serde) as its network, shapes, path, sliced labels and budget, and is
/// rebuilt and checked on the way back in (the walk followed again; no string parsed):
///
/// ```
/// use einsum::{MemoryLimit, PathChoice, Plan};
/// let p = Plan::new("ab,bc->ac", &[vec![2, 3], vec![3, 4]], PathChoice::Optimal, MemoryLimit::Unlimited).unwrap();
/// let text = serde_json::to_string(&p).unwrap();
/// assert_eq!(serde_json::from_str::<Plan>(&text).unwrap(), p);
/// assert!(serde_json::from_str::<Plan>(&text.replace("\"path\":[[0,1]]", "\"path\":[[0,2]]")).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "PlanData", into = "PlanData")]
pub struct Plan {
    /// The parsed expression, when the plan was made from one.
    subscripts: Option<Subscripts>,
    /// The numbered network before broadcast axes get labels of their own (its axes
    /// match the shapes; slicing drops labels from it).
    resolved: LabelledNetwork,
    shapes: Vec<Vec<usize>>,
    /// What is contracted: `resolved` with broadcast axes squeezed.
    network: LabelledNetwork,
    /// Per operand, the labels left after its first sum (its own labels when there is
    /// none): the network the path runs on.
    reduced: Vec<Vec<u32>>,
    /// Which operands are summed first.
    summed_first: Vec<bool>,
    path: ContractionPath,
    walk: Walk,
    /// Labels of the network fixed per slice (none for a whole contraction).
    sliced: Vec<u32>,
    memory_limit: MemoryLimit,
}

impl Plan {
    /// Parses `expression` (the only parse of it), resolves it against `shapes`, finds or
    /// checks the path and follows it.
    pub fn new(expression: &str, shapes: &[Vec<usize>], path: PathChoice, limit: MemoryLimit) -> EinsumResult<Self> {
        Self::from_subscripts(Subscripts::parse(expression)?, shapes, path, limit)
    }

    /// [`Plan::new`] for subscripts already parsed.
    pub fn from_subscripts(
        subscripts: Subscripts,
        shapes: &[Vec<usize>],
        path: PathChoice,
        limit: MemoryLimit,
    ) -> EinsumResult<Self> {
        Self::until(subscripts, shapes, path, limit, &|| false)
    }

    /// [`Plan::from_subscripts`], asking `stop` during the search as
    /// [`crate::search::find_path_until`] does ([`EinsumError::Interrupted`] when it
    /// answers `true`).
    pub fn until(
        subscripts: Subscripts,
        shapes: &[Vec<usize>],
        path: PathChoice,
        limit: MemoryLimit,
        stop: &dyn Fn() -> bool,
    ) -> EinsumResult<Self> {
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        let resolved = subscripts.resolve(&refs)?;
        Self::build(Some(subscripts), resolved, shapes.to_vec(), path, limit, stop)
    }

    /// A plan for a numbered network: operand `i` has the labels `inputs[i]` (one per
    /// axis, a repeat is a diagonal), the output the distinct labels `output`, and label
    /// `c` the size `sizes[c]`. No string is made or parsed (the interleaved form of
    /// opt_einsum's `contract` gives this).
    pub fn from_network(
        inputs: Vec<Vec<u32>>,
        output: Vec<u32>,
        sizes: Vec<usize>,
        path: PathChoice,
        limit: MemoryLimit,
    ) -> EinsumResult<Self> {
        Self::from_network_until(inputs, output, sizes, path, limit, &|| false)
    }

    /// [`Plan::from_network`], asking `stop` during the search as [`Plan::until`] does.
    pub(crate) fn from_network_until(
        inputs: Vec<Vec<u32>>,
        output: Vec<u32>,
        sizes: Vec<usize>,
        path: PathChoice,
        limit: MemoryLimit,
        stop: &dyn Fn() -> bool,
    ) -> EinsumResult<Self> {
        check_network(&inputs, &output, sizes.len())?;
        let shapes = inputs.iter().map(|l| l.iter().map(|&c| sizes[c as usize]).collect()).collect();
        let names = vec![None; sizes.len()];
        let resolved = LabelledNetwork { inputs, output, sizes, names };
        Self::build(None, resolved, shapes, path, limit, stop)
    }

    fn build(
        subscripts: Option<Subscripts>,
        resolved: LabelledNetwork,
        shapes: Vec<Vec<usize>>,
        path: PathChoice,
        limit: MemoryLimit,
        stop: &dyn Fn() -> bool,
    ) -> EinsumResult<Self> {
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        let network = resolved.clone().squeeze_broadcast(&refs);
        let (reduced, summed_first) = crate::cost::sums_first(&network.inputs, &network.output, &network.sizes);
        let path = crate::search::find_path_until(path, &reduced, &network.output, &network.sizes, stop)?;
        let walk = FollowedPath::new(&reduced, &network.output, &path)?.into_walk();
        Ok(Plan {
            subscripts,
            resolved,
            shapes,
            network,
            reduced,
            summed_first,
            path,
            walk,
            sliced: Vec::new(),
            memory_limit: limit,
        })
    }

    /// The plan of one slice: the same contraction with the labels `labels` (of
    /// [`Plan::network`]) fixed, so dropped from every operand, from the output and from
    /// the shapes, along the same path. Labels already sliced stay sliced.
    ///
    /// ```
    /// use einsum::{MemoryLimit, PathChoice, Plan};
    ///
    /// let p = Plan::new("ij,jk->ik", &[vec![2, 3], vec![3, 4]], PathChoice::Greedy, MemoryLimit::default()).unwrap();
    /// let s = p.slice(&[1]).unwrap(); // j
    /// assert_eq!((s.shapes(), s.sliced()), (&[vec![2], vec![4]][..], &[1][..]));
    /// assert_eq!(s.multiply_adds(), 8.0);
    /// ```
    pub fn slice(&self, labels: &[u32]) -> EinsumResult<Plan> {
        let n_labels = self.network.sizes.len();
        if let Some(&c) = labels.iter().find(|&&c| c as usize >= n_labels) {
            return Err(EinsumError::Slice(format!("label {c} is not a label of the network ({n_labels} labels)")));
        }
        let drop = |c: &u32| labels.contains(c);
        let mut resolved = self.resolved.clone();
        let mut shapes = self.shapes.clone();
        for (l, s) in resolved.inputs.iter_mut().zip(shapes.iter_mut()) {
            let keep: Vec<bool> = l.iter().map(|c| !drop(c)).collect();
            let mut k = keep.iter();
            s.retain(|_| *k.next().expect("an axis per label"));
            l.retain(|c| !drop(c));
        }
        resolved.output.retain(|c| !drop(c));
        let subscripts = self.subscripts.as_ref().map(|s| {
            let chars: Vec<char> = labels.iter().filter_map(|&c| self.network.names[c as usize]).collect();
            s.without(&chars)
        });
        let mut plan = Self::build(
            subscripts,
            resolved,
            shapes,
            PathChoice::Explicit(self.path.clone()),
            self.memory_limit,
            &|| false,
        )?;
        plan.sliced =
            self.sliced.iter().copied().chain(labels.iter().copied().filter(|c| !self.sliced.contains(c))).collect();
        Ok(plan)
    }

    /// The parsed expression (`None` for a plan made from a numbered network).
    pub fn subscripts(&self) -> Option<&Subscripts> {
        self.subscripts.as_ref()
    }
    /// The expression for messages: as given, or a description of a numbered network.
    pub fn name(&self) -> String {
        self.name_display().to_string()
    }
    /// [`Plan::name`] written only when displayed: the operand checks of every evaluation
    /// take it, and formatting the expression there cost a fifth of a small network's
    /// evaluation, for a message that only a failed check prints.
    pub(crate) fn name_display(&self) -> impl std::fmt::Display + '_ {
        /// Displays a plan's name.
        struct Name<'a>(&'a Plan);
        impl std::fmt::Display for Name<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match &self.0.subscripts {
                    Some(s) => s.fmt(f),
                    None => write!(f, "a network of {} operands", self.0.shapes.len()),
                }
            }
        }
        Name(self)
    }
    /// The operand shapes.
    pub fn shapes(&self) -> &[Vec<usize>] {
        &self.shapes
    }
    /// The numbered network contracted: labels, output, sizes, names (broadcast axes
    /// squeezed, [`LabelledNetwork::squeeze_broadcast`]).
    pub fn network(&self) -> &LabelledNetwork {
        &self.network
    }
    /// The network as resolved, before broadcast axes get labels of their own: one label
    /// per axis of each shape.
    pub fn resolved(&self) -> &LabelledNetwork {
        &self.resolved
    }
    /// Per operand, the labels it holds when the pairwise steps start: after its first sum
    /// when [`Plan::summed_first`] says it has one, else its labels as given.
    pub fn reduced_inputs(&self) -> &[Vec<u32>] {
        &self.reduced
    }
    /// Whether operand `i` is summed first (over the labels no other operand and not the
    /// output hold).
    pub fn summed_first(&self, i: usize) -> bool {
        self.summed_first.get(i).copied().unwrap_or(false)
    }
    /// The path (the explicit one as given, steps of any length, or the search's).
    pub fn path(&self) -> &ContractionPath {
        &self.path
    }
    /// The path followed over [`Plan::reduced_inputs`] and the output.
    pub fn followed(&self) -> FollowedPath<'_> {
        FollowedPath::from_walk(&self.reduced, &self.network.output, &self.walk)
    }
    /// The pairwise steps.
    pub fn steps(&self) -> &[crate::path::PairStep] {
        self.walk.steps()
    }
    /// The labels fixed per slice (empty for a whole contraction).
    pub fn sliced(&self) -> &[u32] {
        &self.sliced
    }
    /// The memory budget.
    pub fn memory_limit(&self) -> MemoryLimit {
        self.memory_limit
    }
    /// The same contraction re-associated for `threads` threads, when that pays: a path
    /// whose steps mostly wait for each other (a chain contracted one operand at a time)
    /// contracted from both ends and joined in the middle, with at most 1/32 more
    /// multiply-adds, no intermediate larger than the original's largest, and an estimated
    /// time on `threads` threads at least 1.25 times shorter (`balance.rs`). `None` when
    /// the path is kept (always for one thread). The result equals this plan's to rounding
    /// (the order of sums changes).
    ///
    /// ```
    /// use einsum::{ContractionPath, MemoryLimit, PathChoice, Plan};
    ///
    /// // Twelve 8 × 8 matrices, contracted left to right.
    /// let expr = "ab,bc,cd,de,ef,fg,gh,hi,ij,jk,kl,lm->am";
    /// let mut steps = vec![[0, 1]];
    /// steps.extend((2..12).rev().map(|live| [live - 1, 0]));
    /// let chain = PathChoice::Explicit(ContractionPath::new(steps));
    /// let p = Plan::new(expr, &vec![vec![8, 8]; 12], chain, MemoryLimit::default()).unwrap();
    /// assert!(p.balanced_for(1).is_none());
    /// let b = p.balanced_for(2).unwrap();
    /// assert_eq!(b.multiply_adds(), p.multiply_adds());
    /// assert_ne!(b.path(), p.path());
    /// ```
    pub fn balanced_for(&self, threads: usize) -> Option<Plan> {
        let path = crate::balance::balance(
            &self.followed(),
            self.reduced.len(),
            &self.network.output,
            &self.network.sizes,
            threads,
        )?;
        self.along(path)
    }

    /// The same contraction with each run of small element-wise factors that the path
    /// multiplies into one large intermediate in turn multiplied together first, and the
    /// intermediate by their product once (`merge.rs`): one pass over it instead of one
    /// per factor, with fewer multiply-adds. `None` when the path has no such run. The
    /// result equals this plan's to rounding (the products associate differently).
    ///
    /// ```
    /// use einsum::{ContractionPath, MemoryLimit, PathChoice, Plan};
    ///
    /// // A 3^10 tensor times three 3 × 3 factors in a row, then summed with another.
    /// let shapes = [vec![3; 10], vec![3, 3], vec![3, 3], vec![3, 3], vec![3; 10]];
    /// let path = PathChoice::Explicit(ContractionPath::new(vec![[0, 1], [0, 3], [0, 2], [0, 1]]));
    /// let p = Plan::new("abcdefghij,ab,bc,cd,abcdefghij->", &shapes, path, MemoryLimit::default()).unwrap();
    /// let m = p.with_factors_merged().unwrap();
    /// assert!(m.multiply_adds() < p.multiply_adds());
    /// assert_ne!(m.path(), p.path());
    /// ```
    pub fn with_factors_merged(&self) -> Option<Plan> {
        let path = crate::merge::merge_factors(&self.followed(), self.reduced.len(), &self.network.sizes)?;
        self.along(path)
    }

    /// This plan along `path`, another path over the same reduced network (`None` if it
    /// cannot be followed).
    fn along(&self, path: ContractionPath) -> Option<Plan> {
        let walk = FollowedPath::new(&self.reduced, &self.network.output, &path).ok()?.into_walk();
        Some(Plan { path, walk, ..self.clone() })
    }

    /// The same plan with another memory budget.
    pub fn with_memory_limit(mut self, limit: MemoryLimit) -> Self {
        self.memory_limit = limit;
        self
    }
    /// The output's shape.
    pub fn output_shape(&self) -> Vec<usize> {
        self.network.output.iter().map(|&c| self.network.sizes[c as usize]).collect()
    }

    /// Multiply-adds of the plan: the loops of every first sum, of every pairwise step and
    /// of the final reduction (the module docs' cost model).
    pub fn multiply_adds(&self) -> f64 {
        crate::cost::cost(&self.network.inputs, &self.summed_first, &self.followed(), &self.network.sizes)
    }
}

/// A path finder's name, its aliases and the choice it stands for.
type Finder = (&'static str, &'static [&'static str], fn() -> PathChoice);

/// The path finders by name, the one table every front end reads: `(name, aliases, the
/// choice)`. opt_einsum's names for the same searches are aliases (`auto-hq` is `auto`,
/// `random-greedy-128` is `random-greedy`).
const FINDERS: &[Finder] = &[
    ("greedy", &[], || PathChoice::Greedy),
    ("optimal", &[], || PathChoice::Optimal),
    ("dp", &[], || PathChoice::Dp),
    ("random-greedy", &["random_greedy", "random-greedy-128"], || PathChoice::RandomGreedy {
        trials: crate::search::RANDOM_GREEDY_TRIALS,
        seed: 0,
    }),
    ("auto", &["auto-hq"], || PathChoice::Auto),
    ("hyper", &[], || PathChoice::Hyper(crate::hyper::HyperOptions::default())),
];

impl PathChoice {
    /// The names [`PathChoice`]'s `FromStr` takes for a finder (aliases aside), in the
    /// order messages list them.
    pub fn names() -> impl Iterator<Item = &'static str> {
        FINDERS.iter().map(|(name, _, _)| *name)
    }

    /// The finder's name (`"explicit"` for a path given).
    ///
    /// ```
    /// use einsum::PathChoice;
    /// assert_eq!(PathChoice::RandomGreedy { trials: 3, seed: 9 }.name(), "random-greedy");
    /// assert_eq!("auto-hq".parse::<PathChoice>().unwrap().name(), "auto");
    /// ```
    pub fn name(&self) -> &'static str {
        let kind = std::mem::discriminant(self);
        FINDERS.iter().find(|(_, _, f)| std::mem::discriminant(&f()) == kind).map_or("explicit", |(name, _, _)| name)
    }
}

impl std::str::FromStr for PathChoice {
    type Err = EinsumError;

    /// The one parser of path names (the CLI's `--path`, Python's `optimize=`): a
    /// finder's name or alias ([`PathChoice::names`]), or an explicit path in
    /// opt_einsum's printed form ([`ContractionPath`]'s `FromStr`).
    ///
    /// ```
    /// use einsum::{ContractionPath, PathChoice};
    /// assert_eq!("dp".parse::<PathChoice>().unwrap(), PathChoice::Dp);
    /// assert_eq!("auto-hq".parse::<PathChoice>().unwrap(), PathChoice::Auto);
    /// assert!(matches!("random_greedy".parse(), Ok(PathChoice::RandomGreedy { .. })));
    /// let p = "[(1, 2), (0, 1)]".parse::<PathChoice>().unwrap();
    /// assert_eq!(p, PathChoice::Explicit(ContractionPath::new(vec![[1, 2], [0, 1]])));
    /// assert!("fastest".parse::<PathChoice>().unwrap_err().to_string().contains("greedy, optimal"));
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if t.starts_with('[') {
            return t.parse::<ContractionPath>().map(PathChoice::Explicit);
        }
        match FINDERS.iter().find(|(name, aliases, _)| *name == t || aliases.contains(&t)) {
            Some((_, _, choice)) => Ok(choice()),
            None => Err(EinsumError::Path {
                step: None,
                message: format!(
                    "`{t}` is not a path finder: use {} or a list of steps like [(0, 1), (0, 1)]",
                    PathChoice::names().collect::<Vec<_>>().join(", ")
                ),
            }),
        }
    }
}

/// Checks a numbered network: every label below `n_labels`, output labels distinct and
/// held by an operand.
fn check_network(inputs: &[Vec<u32>], output: &[u32], n_labels: usize) -> EinsumResult<()> {
    let mut held = vec![false; n_labels];
    for (i, l) in inputs.iter().enumerate() {
        for &c in l {
            let h = held.get_mut(c as usize).ok_or_else(|| {
                EinsumError::Shape(format!("operand {i} has label {c}, but only {n_labels} label sizes are given"))
            })?;
            *h = true;
        }
    }
    for (k, &c) in output.iter().enumerate() {
        if !held.get(c as usize).copied().unwrap_or(false) {
            return Err(EinsumError::Shape(format!("output label {c} is in no operand")));
        }
        if output[..k].contains(&c) {
            return Err(EinsumError::Shape(format!("output label {c} is repeated")));
        }
    }
    Ok(())
}

/// A [`Plan`] as it serializes: what rebuilds it (the resolved network, its names, the
/// shapes, the path, the sliced labels, the budget in bytes or `None` for unlimited).
#[derive(serde::Serialize, serde::Deserialize)]
struct PlanData {
    subscripts: Option<crate::subscripts::SubscriptsParts>,
    inputs: Vec<Vec<u32>>,
    output: Vec<u32>,
    sizes: Vec<usize>,
    names: Vec<Option<char>>,
    shapes: Vec<Vec<usize>>,
    path: Vec<Vec<usize>>,
    sliced: Vec<u32>,
    memory_limit: Option<u64>,
}

impl From<Plan> for PlanData {
    fn from(p: Plan) -> PlanData {
        let LabelledNetwork { inputs, output, sizes, names } = p.resolved;
        PlanData {
            subscripts: p.subscripts.as_ref().map(Subscripts::parts),
            inputs,
            output,
            sizes,
            names,
            shapes: p.shapes,
            path: p.path.steps().to_vec(),
            sliced: p.sliced,
            memory_limit: match p.memory_limit {
                MemoryLimit::Bytes(b) => Some(b),
                MemoryLimit::Unlimited => None,
            },
        }
    }
}

impl TryFrom<PlanData> for Plan {
    type Error = EinsumError;

    /// Rebuilds a plan, checking what the constructors check: the network, the shapes
    /// against it (an axis has its label's size, or 1 broadcast), the path (followed again).
    fn try_from(d: PlanData) -> EinsumResult<Plan> {
        check_network(&d.inputs, &d.output, d.sizes.len())?;
        let bad = |why: String| EinsumError::Shape(format!("a serialized plan: {why}"));
        if d.names.len() != d.sizes.len() || d.shapes.len() != d.inputs.len() {
            return Err(bad("as many names as labels and shapes as operands".into()));
        }
        for (i, (l, s)) in d.inputs.iter().zip(&d.shapes).enumerate() {
            if l.len() != s.len() || l.iter().zip(s).any(|(&c, &n)| n != d.sizes[c as usize] && n != 1) {
                return Err(bad(format!("operand {i} has shape {s:?} but labels {l:?}")));
            }
        }
        if let Some(&c) = d.sliced.iter().find(|&&c| c as usize >= d.sizes.len()) {
            return Err(bad(format!("sliced label {c} is not a label")));
        }
        let subscripts = d.subscripts.map(Subscripts::from_parts).transpose()?;
        if subscripts.as_ref().is_some_and(|s| s.inputs().len() != d.inputs.len()) {
            return Err(bad("subscripts for another operand count".into()));
        }
        let limit = d.memory_limit.map_or(MemoryLimit::Unlimited, MemoryLimit::Bytes);
        let resolved = LabelledNetwork { inputs: d.inputs, output: d.output, sizes: d.sizes, names: d.names };
        let path = PathChoice::Explicit(ContractionPath::from_steps(d.path));
        let mut plan = Plan::build(subscripts, resolved, d.shapes, path, limit, &|| false)?;
        plan.sliced = d.sliced;
        Ok(plan)
    }
}

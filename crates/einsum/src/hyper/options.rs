//! The hyper-optimizer's settings and what it measures: [`Objective`], [`HyperOptions`]
//! and [`TreeCost`]. They depend on nothing of the search, so `PathChoice` can hold the
//! options without the path module and the search pointing at each other.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::time::Duration;

use crate::error::{EinsumError, EinsumResult};

/// What a tree costs: multiply-adds, its largest intermediate and the elements its
/// intermediates write, all in elements (`f64`: products of label sizes overflow
/// integers long before they overflow `f64`).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct TreeCost {
    /// The sums done first (labels one input alone holds) plus, over pairwise steps, the
    /// product of the sizes of every label the step touches ([`crate::search::path_cost`]
    /// without the final reordering).
    pub multiply_adds: f64,
    /// The elements of the largest intermediate.
    pub largest_intermediate: f64,
    /// The elements written by all intermediates together.
    pub written: f64,
}

/// What a search minimizes.
///
/// ```
/// use einsum::hyper::Objective;
/// assert_eq!("flops".parse::<Objective>().unwrap(), Objective::Flops);
/// assert_eq!("combo-64".parse::<Objective>().unwrap(), Objective::Combo { factor: 64.0 });
/// assert!("speed".parse::<Objective>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum Objective {
    /// The multiply-adds of all steps.
    #[default]
    Flops,
    /// The largest intermediate (ties broken by multiply-adds).
    Size,
    /// The elements written by all intermediates (memory traffic).
    Write,
    /// Multiply-adds plus `factor` times the elements written (cotengra's `combo`).
    Combo {
        /// The weight of a written element against a multiply-add.
        factor: f64,
    },
}

impl Objective {
    /// The value this objective gives a tree's cost.
    pub fn score(&self, cost: &TreeCost) -> f64 {
        match *self {
            Objective::Flops => cost.multiply_adds,
            Objective::Size => cost.largest_intermediate,
            Objective::Write => cost.written,
            Objective::Combo { factor } => cost.multiply_adds + factor * cost.written,
        }
    }

    /// Whether `a` is better than `b` under this objective (ties by multiply-adds).
    pub(crate) fn better(&self, a: &TreeCost, b: &TreeCost) -> bool {
        let (x, y) = (self.score(a), self.score(b));
        x < y || (x == y && a.multiply_adds < b.multiply_adds)
    }
}

impl FromStr for Objective {
    type Err = EinsumError;

    /// `flops`, `size`, `write`, `combo` (factor 64) or `combo-F`.
    fn from_str(s: &str) -> EinsumResult<Self> {
        let bad = || {
            EinsumError::Search(format!("unknown objective {s:?}: expected flops, size, write, combo or combo-FACTOR"))
        };
        Ok(match s {
            "flops" => Objective::Flops,
            "size" => Objective::Size,
            "write" => Objective::Write,
            "combo" => Objective::Combo { factor: 64.0 },
            _ => match s.strip_prefix("combo-").map(str::parse::<f64>) {
                // `+ 0.0` turns -0 into 0, so equal factors hash alike.
                Some(Ok(factor)) if factor.is_finite() && factor >= 0.0 => Objective::Combo { factor: factor + 0.0 },
                _ => return Err(bad()),
            },
        })
    }
}

impl fmt::Display for Objective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Objective::Flops => f.write_str("flops"),
            Objective::Size => f.write_str("size"),
            Objective::Write => f.write_str("write"),
            Objective::Combo { factor } => write!(f, "combo-{factor}"),
        }
    }
}

/// The default time budget of [`HyperOptions`].
pub const DEFAULT_MAX_TIME: Duration = Duration::from_secs(1);

/// The hyper-optimizer's settings.
///
/// ```
/// use std::time::Duration;
/// use einsum::hyper::{HyperOptions, Objective};
/// let opts = HyperOptions { max_time: Some(Duration::from_millis(200)), seed: 7, ..HyperOptions::default() };
/// assert_eq!(opts.minimize, Objective::Flops);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct HyperOptions {
    /// Stop starting trials after this long ([`DEFAULT_MAX_TIME`] by default). The search
    /// returns within this plus the time of the batch of trials under way (the first batch,
    /// two trials, or one, the plain greedy tree, on networks of 4096 operands or more,
    /// always runs; later ones are of up to 16 trials on the pool's threads, and none
    /// starts with less of the budget left than three times the slowest trial so far); the last reconfiguration
    /// and the slicing stop at the budget. On networks of 4096 operands or more the trials
    /// take 60% of it, skip their own reconfiguration, and stop partitioning when their
    /// share ends; the rest goes to reconfiguring the best trees.
    pub max_time: Option<Duration>,
    /// Stop after this many trials.
    pub max_trials: Option<u32>,
    /// What to minimize.
    pub minimize: Objective,
    /// The random stream's seed.
    pub seed: u64,
    /// Subtree reconfiguration of promising trees, over frontiers of this many tensors
    /// (0: none; 3 to 12, default 8).
    pub reconf_size: u32,
    /// Slice the best trees until no intermediate of one slice has more than this many
    /// elements, reconfiguring after each sliced label (cotengra's `target_size`); the
    /// objective then scores the whole contraction, every slice together.
    pub slice_target: Option<u64>,
}

impl Default for HyperOptions {
    fn default() -> Self {
        HyperOptions {
            max_time: Some(DEFAULT_MAX_TIME),
            max_trials: None,
            minimize: Objective::Flops,
            seed: 0,
            reconf_size: 8,
            slice_target: None,
        }
    }
}

impl HyperOptions {
    /// What a path cache ([`crate::path_cache`]) keys this search by: the objective and
    /// the slicing target, not the budgets or the seed, so a later run with any budget
    /// reuses the path.
    pub fn cache_tag(&self) -> String {
        format!("hyper minimize={} slice_target={:?}", self.minimize, self.slice_target)
    }
}

// `PathChoice` is hashed and compared as a cache key; a combo factor is compared by bits.
impl Eq for HyperOptions {}

impl Hash for HyperOptions {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.max_time.hash(h);
        self.max_trials.hash(h);
        self.seed.hash(h);
        self.reconf_size.hash(h);
        self.slice_target.hash(h);
        std::mem::discriminant(&self.minimize).hash(h);
        if let Objective::Combo { factor } = self.minimize {
            factor.to_bits().hash(h);
        }
    }
}

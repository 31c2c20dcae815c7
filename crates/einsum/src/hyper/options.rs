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

    /// This objective's share of one step touching `touched` elements with a result of
    /// `result` elements: how reconfiguration ranks nodes and annealing judges a move.
    pub(crate) fn step_cost(&self, touched: f64, result: f64) -> f64 {
        match *self {
            Objective::Flops => touched,
            Objective::Size | Objective::Write => result,
            Objective::Combo { factor } => touched + factor * result,
        }
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

/// A time budget given in seconds, checked: positive, finite and under 10^9 s (every
/// entry point, the CLI's `--max-time` and Python's `max_time`, reads seconds through this).
///
/// ```
/// use einsum::hyper::budget;
/// assert_eq!(budget(0.5).unwrap().as_millis(), 500);
/// assert!(budget(-1.0).is_err() && budget(f64::NAN).is_err() && budget(1e300).is_err());
/// ```
pub fn budget(seconds: f64) -> EinsumResult<Duration> {
    if seconds.is_finite() && seconds > 0.0 && seconds < 1e9 {
        Ok(Duration::from_secs_f64(seconds))
    } else {
        Err(EinsumError::Search(format!("max_time={seconds}: expected a positive number of seconds")))
    }
}

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
    /// Stop starting trials after this long ([`DEFAULT_MAX_TIME`] by default). A trial
    /// under way stops reconfiguring, annealing and partitioning at the budget, as do the
    /// last reconfiguration and the slicing; no batch starts with less of the budget left
    /// than three times the slowest trial so far. The first batch always builds its trees,
    /// so there is a path to return: two trials, or one, the plain greedy tree, on
    /// networks of 4096 operands or more, where the trials take 60% of the budget and skip
    /// their own reconfiguration, and the rest goes to reconfiguring the best trees.
    pub max_time: Option<Duration>,
    /// Stop after this many trials.
    pub max_trials: Option<u32>,
    /// What to minimize.
    pub minimize: Objective,
    /// The random stream's seed.
    pub seed: u64,
    /// Subtree reconfiguration of every tree, over frontiers of this many tensors (0:
    /// none; 3 to 12, default 8).
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
    /// Checks what [`crate::hyper::hyper_path`] needs: a bound (a time budget, a trial
    /// budget or both), at least one trial, and a reconfiguration frontier of 0 (none) or
    /// 3 to 12 tensors.
    ///
    /// ```
    /// use einsum::hyper::HyperOptions;
    /// assert!(HyperOptions::default().check().is_ok());
    /// assert!(HyperOptions { max_time: None, ..HyperOptions::default() }.check().is_err());
    /// assert!(HyperOptions { reconf_size: 20, ..HyperOptions::default() }.check().is_err());
    /// ```
    pub fn check(&self) -> EinsumResult<()> {
        let bad = |m: String| Err(EinsumError::Search(m));
        if self.max_time.is_none() && self.max_trials.is_none() {
            return bad("no time budget and no trial budget: the search needs a bound".into());
        }
        if self.max_trials == Some(0) {
            return bad("a trial budget of 0: at least one trial runs".into());
        }
        if self.reconf_size != 0 && !(3..=12).contains(&self.reconf_size) {
            return bad(format!(
                "a reconfiguration frontier of {} tensors: expected 0 (none) or 3 to 12",
                self.reconf_size
            ));
        }
        if self.slice_target == Some(0) {
            return bad("a slicing target of 0 elements: expected at least 1".into());
        }
        Ok(())
    }

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

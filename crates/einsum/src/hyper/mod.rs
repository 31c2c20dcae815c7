//! The hyper-optimizing path search: many randomized trees from several drivers, their
//! parameters tuned as the search goes, each tree improved by subtree
//! reconfiguration, trials run in parallel on the rayon pool, the whole bounded by a time
//! budget, a trial budget and a caller's stop test. The best tree wins by the chosen
//! [`Objective`].
//!
//! Drivers (`Method`):
//! - randomized greedy (`greedy.rs`): Boltzmann-sampled pairs, the weight of the operands'
//!   sizes and the temperature as parameters;
//! - recursive partitioning (`partition.rs`): METIS splits the network until groups are small,
//!   the greedy driver contracts each group and joins its parts; imbalance, cutoff, parts
//!   and the greedy parameters as parameters;
//! - simulated annealing over trees (`anneal.rs`): rotations of a randomized greedy tree
//!   accepted by the Metropolis rule; the inverse temperatures, the sweeps and the greedy
//!   parameters as parameters.
//!
//! Tuning (`tune.rs`): each driver's parameters live in a unit box; the first trials of a
//! driver sample it uniformly, later ones perturb one of the driver's best few or, now and
//! then, sample afresh; the driver itself is drawn with a preference for the one with the
//! best tree so far. Suggestions are made for a whole batch of trials before it runs and
//! results are read back in trial order, so a seeded search with a trial budget and no time
//! budget is reproducible whatever the number of threads.
//!
//! Large networks (`LARGE_NETWORK`, 4096 operands, and more) are searched within the
//! budget: a first batch of one trial (the plain greedy tree), no reconfiguration inside
//! trials, partitioning that stops splitting when the trials' share of the budget (60%)
//! ends, and the rest of the budget for reconfiguring the best trees, most expensive
//! step first.
//!
//! Networks of at most [`EXACT_OPERANDS`] operands are solved exactly, for any objective,
//! with no trial at all: a subtree reconfiguration whose frontier is every input.
//!
//! Invariant: the path returned is valid for the network's operand count, and its
//! reported cost is the tree's cost on the network, which is
//! [`crate::search::path_cost`] of the path less the final reordering step.

mod anneal;
mod greedy;
mod options;
mod partition;
mod reconf;
mod slice;
mod tree;
mod tune;

use std::time::Instant;

use rayon::prelude::*;

use crate::error::{EinsumError, EinsumResult};
use crate::path::ContractionPath;

use self::anneal::anneal_tree;
use self::greedy::{GreedyParams, greedy};
use self::partition::partition_tree;
use self::reconf::{RECONF_TRIES, reconfigure};
use self::slice::slice_tree;
use self::tree::{Net, Tree};
use self::tune::{Method, Tuner};
use crate::rng::Rng;

/// Trials suggested together and run in parallel; more threads than this are not used.
const BATCH: u32 = 16;

/// Networks of at least this many operands start with a batch of one trial, so that the
/// first batch, which always runs whole, is the quickest tree there is (10^4 tensors and
/// more: a partition trial takes seconds there).
const LARGE_NETWORK: usize = 4096;

/// How many of the best trees the search keeps for its last, deeper reconfiguration.
const POLISHED: usize = 8;

/// Networks of at most this many operands are solved exactly (`O(3^n)` subset splits),
/// whatever the objective, with no trial.
pub const EXACT_OPERANDS: usize = 12;

pub use self::options::{DEFAULT_MAX_TIME, HyperOptions, Objective, TreeCost, budget};

/// What a search did.
#[derive(Clone, Debug, PartialEq)]
pub struct HyperReport {
    /// Trials run (0 when the network was solved exactly).
    pub trials: u32,
    /// Wall time of the search.
    pub seconds: f64,
    /// The best tree's cost: of the whole contraction, every slice together, for a sliced
    /// one (its largest intermediate is one slice's).
    pub cost: TreeCost,
    /// The labels to slice ([`HyperOptions::slice_target`]); empty when unsliced.
    pub sliced: Vec<u32>,
    /// The number of slices (1 when unsliced).
    pub slices: f64,
    /// The driver that found the best tree (`"greedy"`, `"partition"`, `"anneal"`, or
    /// `"optimal"`).
    pub method: &'static str,
    /// Whether the caller's stop test ended the search (the best tree so far is returned).
    pub interrupted: bool,
}

/// Progress of a running search, given to the caller's callback after each batch.
#[derive(Clone, Debug, PartialEq)]
pub struct HyperProgress {
    /// Trials run so far.
    pub trials: u32,
    /// Seconds since the search started.
    pub seconds: f64,
    /// The best cost so far.
    pub best: TreeCost,
}

/// A path and what its search did.
#[derive(Clone, Debug, PartialEq)]
pub struct HyperPath {
    /// The best path found.
    pub path: ContractionPath,
    /// The search's report.
    pub report: HyperReport,
}

/// Searches a path for the numbered network (labels `0..sizes.len()`) with the default
/// stop test (never) and no progress callback.
///
/// ```
/// use einsum::hyper::{HyperOptions, hyper_path};
/// use einsum::search::path_cost;
/// // A ring of 20 matrices with bond 4.
/// let inputs: Vec<Vec<u32>> = (0..20).map(|i| vec![i, (i + 1) % 20]).collect();
/// let sizes = vec![4; 20];
/// let opts = HyperOptions { max_time: None, max_trials: Some(16), ..HyperOptions::default() };
/// let found = hyper_path(&inputs, &[], &sizes, &opts).unwrap();
/// assert!(found.path.validate(20).is_ok());
/// assert_eq!(found.report.trials, 16);
/// assert_eq!(found.report.cost.multiply_adds, path_cost(&inputs, &[], &sizes, &found.path).unwrap());
/// ```
pub fn hyper_path(
    inputs: &[Vec<u32>],
    output: &[u32],
    sizes: &[usize],
    opts: &HyperOptions,
) -> EinsumResult<HyperPath> {
    hyper_path_until(inputs, output, sizes, opts, &|| false, &mut |_| {})
}

/// [`hyper_path`] asking `stop` between batches of trials (when it answers `true` the
/// search ends with the best tree so far and `report.interrupted` set) and calling
/// `progress` after each batch.
pub fn hyper_path_until(
    inputs: &[Vec<u32>],
    output: &[u32],
    sizes: &[usize],
    opts: &HyperOptions,
    stop: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(&HyperProgress),
) -> EinsumResult<HyperPath> {
    let start = Instant::now();
    opts.check()?;
    let n = inputs.len();
    if let Some(&c) = inputs.iter().flatten().chain(output).find(|&&c| c as usize >= sizes.len()) {
        return Err(EinsumError::Search(format!("label {c} has no size (the network has {} labels)", sizes.len())));
    }
    let net = Net::new(inputs, output, sizes);
    let report = |trials, cost, method, interrupted| HyperReport {
        trials,
        seconds: start.elapsed().as_secs_f64(),
        cost,
        sliced: Vec::new(),
        slices: 1.0,
        method,
        interrupted,
    };
    if n < 2 {
        let tree = Tree::from_ssa(n, &[]);
        return Ok(HyperPath { path: tree.to_path(), report: report(0, TreeCost::default(), "optimal", false) });
    }
    let (elite, trials, interrupted) = if n <= EXACT_OPERANDS {
        // Reconfiguring the whole tree at once is the exact DP over every subset.
        let items = (0..n).map(|i| net.leaf_legs(i)).collect();
        let mut tree = Tree::from_ssa(n, &greedy(&net, items, GreedyParams::PLAIN, &mut Rng::new(0)));
        reconfigure(&net, &mut tree, n, opts.minimize, 4 * n, &|| false);
        let cost = tree.cost(&net);
        (vec![(tree, cost, "optimal")], 0, false)
    } else {
        run_trials(&net, opts, start, stop, progress)
    };
    let deadline = opts.max_time.map(|t| start + t);
    // What ends the work after the trials (polish, slicing): the budget, or the caller's
    // stop test, asked on this thread only, so that work runs here, one tree at a time.
    let stopped = std::cell::Cell::new(interrupted);
    let give_up = || {
        let s = stopped.get() || stop();
        stopped.set(s);
        s || deadline.is_some_and(|d| Instant::now() >= d)
    };
    // A last, deeper reconfiguration of the best few trees within what is left of the
    // budget: the best raw tree is not always the best once reconfigured.
    let mut elite = elite;
    if opts.reconf_size > 0 && trials > 0 {
        let k = opts.reconf_size as usize + 2;
        for (tree, cost, _) in &mut elite {
            if give_up() {
                break;
            }
            if reconfigure(&net, tree, k, opts.minimize, 2 * n, &give_up) {
                *cost = tree.cost(&net);
            }
        }
    }
    let Some(target) = opts.slice_target else {
        let (tree, cost, method) = elite
            .into_iter()
            .reduce(|a, b| if opts.minimize.better(&b.1, &a.1) { b } else { a })
            .expect("at least one trial runs");
        return Ok(HyperPath { path: tree.to_path(), report: report(trials, cost, method, stopped.get()) });
    };
    // Slice each of the best trees, reconfiguring as labels go, and keep the cheapest
    // whole contraction.
    let k = opts.reconf_size as usize;
    let sliced: Vec<(Tree, Option<slice::Sliced>, &'static str)> = elite
        .into_iter()
        .map(|(mut tree, _, method)| {
            let s = slice_tree(&net, &mut tree, target as f64, opts.minimize, k, &give_up);
            (tree, s, method)
        })
        .collect();
    let (tree, s, method) = sliced
        .into_iter()
        .filter_map(|(t, s, m)| s.map(|s| (t, s, m)))
        .reduce(|a, b| if opts.minimize.better(&b.1.total(), &a.1.total()) { b } else { a })
        .ok_or_else(|| {
            EinsumError::Search(format!("no slicing brings every intermediate to {target} elements or fewer"))
        })?;
    let mut r = report(trials, s.total(), method, stopped.get());
    (r.sliced, r.slices) = (s.labels, s.slices);
    Ok(HyperPath { path: tree.to_path(), report: r })
}

/// The best few trees of a search, each with its cost and the name of its driver.
type Elite = Vec<(Tree, TreeCost, &'static str)>;

/// Runs batches of trials until a budget or `stop` ends them (see the module docs).
/// Returns the best few trees (best first, no two of equal cost), the trial count, and
/// whether `stop` ended the trials.
fn run_trials(
    net: &Net,
    opts: &HyperOptions,
    start: Instant,
    stop: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(&HyperProgress),
) -> (Elite, u32, bool) {
    // On a large network the trials leave the last 40% of the budget to the
    // reconfiguration of the best trees, which trials skip there (see `run_trial`).
    let share = if net.n() >= LARGE_NETWORK { 0.6 } else { 1.0 };
    let deadline = opts.max_time.map(|t| start + t.mul_f64(share));
    let max_trials = opts.max_trials.unwrap_or(u32::MAX).max(1);
    // Batches of fixed sizes, so the tuner sees the same results before each suggestion
    // whatever the number of threads (a seeded search with a trial budget is reproducible
    // anywhere); they start small, since a first batch always runs whole: of one trial
    // (the plain greedy tree, the quickest) on a large network, two otherwise.
    let mut batch = if net.n() >= LARGE_NETWORK { 1 } else { 2u32 };
    // The slowest trial so far: no batch starts unless three times that is left of the
    // whole budget (a trial cannot be cut short, on a large network one takes a while, and
    // the first, the plain greedy tree, is the quickest: a partition trial's first split
    // of 10^5 tensors alone takes longer).
    let mut slowest = std::time::Duration::ZERO;
    let budget_end = opts.max_time.map(|t| start + t);
    let mut tuner = Tuner::new(opts.seed);
    // The best few trees, best first, no two of equal cost.
    let mut elite: Vec<(Tree, TreeCost, &'static str)> = Vec::new();
    let mut trials = 0u32;
    let mut interrupted = false;
    while trials < max_trials {
        // The first batch always runs, so there is a tree to return.
        if trials > 0 {
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d)
                || budget_end.is_some_and(|d| now.checked_add(3 * slowest).is_none_or(|end| end >= d))
            {
                break;
            }
            if stop() {
                interrupted = true;
                break;
            }
        }
        let count = batch.min(max_trials - trials);
        let suggestions: Vec<(u32, Method)> = (trials..trials + count).map(|t| (t, tuner.suggest(t))).collect();
        // A trial of a later batch that would start past the deadline does not run: on a
        // large network a batch has more trials than threads, and each takes a while.
        let first = trials == 0;
        let results: Vec<Option<(Tree, TreeCost, std::time::Duration)>> = suggestions
            .par_iter()
            .map(|&(t, method)| {
                let began = Instant::now();
                if !first && deadline.is_some_and(|d| began >= d) {
                    return None;
                }
                let (tree, cost) = run_trial(net, method, opts, Rng::for_trial(opts.seed, t as u64), deadline);
                Some((tree, cost, began.elapsed()))
            })
            .collect();
        let skipped = results.iter().any(Option::is_none);
        for ((_, method), result) in suggestions.into_iter().zip(results) {
            let Some((tree, cost, took)) = result else {
                // The tuner hears of every suggestion, in order.
                tuner.report(method, f64::INFINITY);
                continue;
            };
            trials += 1;
            slowest = slowest.max(took);
            tuner.report(method, opts.minimize.score(&cost));
            let at = elite.partition_point(|e| !opts.minimize.better(&cost, &e.1));
            if at < POLISHED && !elite.iter().any(|e| e.1 == cost) {
                elite.insert(at, (tree, cost, method.name()));
                elite.truncate(POLISHED);
            }
        }
        if skipped {
            // Trials were skipped: the deadline has passed.
            progress(&HyperProgress { trials, seconds: start.elapsed().as_secs_f64(), best: elite[0].1 });
            break;
        }
        batch = (2 * batch).min(BATCH);
        progress(&HyperProgress { trials, seconds: start.elapsed().as_secs_f64(), best: elite[0].1 });
    }
    (elite, trials, interrupted)
}

/// One trial: a driver's tree, reconfigured (until the deadline at most) unless the
/// network is large (there reconfiguring every trial would take the whole budget; the best
/// trees are reconfigured after the trials instead).
fn run_trial(
    net: &Net,
    method: Method,
    opts: &HyperOptions,
    mut rng: Rng,
    deadline: Option<Instant>,
) -> (Tree, TreeCost) {
    let mut tree = match method {
        Method::Greedy(params) => {
            let items = (0..net.n()).map(|i| net.leaf_legs(i)).collect();
            Tree::from_ssa(net.n(), &greedy(net, items, params, &mut rng))
        }
        Method::Partition(params) => partition_tree(net, params, &mut rng, deadline),
        Method::Anneal(params) => anneal_tree(net, params, opts.minimize, &mut rng, deadline),
    };
    let mut cost = tree.cost(net);
    if opts.reconf_size > 0
        && net.n() < LARGE_NETWORK
        && reconfigure(net, &mut tree, opts.reconf_size as usize, opts.minimize, net.n().min(RECONF_TRIES), &|| {
            deadline.is_some_and(|d| Instant::now() >= d)
        })
    {
        cost = tree.cost(net);
    }
    (tree, cost)
}

/// The plain greedy driver's tree cost (tests compare the search against it).
#[cfg(test)]
fn plain_greedy_cost(net: &Net) -> TreeCost {
    let items = (0..net.n()).map(|i| net.leaf_legs(i)).collect();
    Tree::from_ssa(net.n(), &greedy(net, items, GreedyParams::PLAIN, &mut Rng::new(0))).cost(net)
}

#[cfg(test)]
mod tests;

"""Path search against cotengra and opt_einsum (issue 37's "Standard"): one process runs every
finder on every network of `networks.py` and scores every path with the same count.

    python python/bench/paths_hyper.py [--budgets 1,10] [--networks SUBSTRING] [--quick]
                                       [--seed 0] [--repeats 1] [--json OUT]
    python python/bench/paths_hyper.py --render OUT     # the tables of a saved run again

Finders: cgx's 'greedy', 'random-greedy' and 'auto', and its hyper-optimizer
(`cgx.HyperOptimizer(max_time=T, seed=S)` passed as `optimize=`) at the budget T and at T/10
when the package has it; opt_einsum's 'auto' and 'auto-hq'; cotengra's `HyperOptimizer` at
the budget T, in this process (`parallel=False`), with its default methods (kahypar when it
is installed) and its default tuner. cgx is called through its public API only
(`cgx.contract_path(eq, *shapes, shapes=True, optimize=...)`), as a user would.

The count (`score`): the sum over the path's steps of the product of the sizes of every label
the step touches (both operands' labels; an input's labels are its own, an intermediate's are
those of its operands still needed by another remaining operand or the output). That is the
number of multiply-adds, and cotengra's `contraction_cost` where no operand alone holds a
label that is summed (cotengra sums such a label first, for free; no network here has one).
opt_einsum's `PathInfo.opt_cost` counts the same product twice for a step that sums a label
away and once for one that sums none (`flop_count`'s `op_factor`), so it lies between this
count and twice it; `python/tests/test_bench_paths.py` checks both relations. The largest
intermediate is the largest step result (inputs not counted, as in opt_einsum's
`largest_intermediate`).

Output: one markdown table per budget (a cell is `log10 flops [log2 largest intermediate]
(search seconds)`, the row's lowest flops in bold), then the issue's targets as summary lines.
Budget-free finders run once per network and appear in every table; `--repeats N` runs each
budgeted search N times (seeds SEED to SEED+N-1) and reports the run of median flops, with the
range, since a search bounded by wall-clock time on a shared machine varies. `--json` writes
every row, with the process's CPU seconds beside the wall-clock ones: on a shared machine they
tell how much of the cores a search had.
"""

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import networks as nw  # noqa: E402


@dataclasses.dataclass
class Score:
    """A path's count: multiply-adds, the largest intermediate (elements), and per step the
    product of the touched labels' sizes and whether the step sums a label away."""

    flops: int
    largest: int
    steps: list

    @property
    def log10_flops(self) -> float:
        return math.log10(self.flops) if self.flops > 0 else 0.0

    @property
    def log2_size(self) -> float:
        return math.log2(self.largest) if self.largest > 0 else 0.0

    @property
    def opt_einsum_cost(self) -> int:
        """opt_einsum's `opt_cost` for the same path: a step that sums a label counts twice."""
        return sum(size * (2 if summed else 1) for size, summed in self.steps)


def score(inputs, output, sizes, path) -> Score:
    """The reference count of `path` (opt_einsum's linear form: each step names positions in
    the current operand list, which are removed and their result appended). Raises
    `ValueError` for a path that is not one: a position out of range or repeated, an empty
    step, or more than one operand left at the end."""
    ops = [frozenset(t) for t in inputs]
    out = frozenset(output)
    # How many current operands hold each label, so "needed elsewhere" is a lookup.
    count = {}
    for t in ops:
        for c in t:
            count[c] = count.get(c, 0) + 1
    flops, largest, steps = 0, 0, []
    for k, step in enumerate(path):
        where = [int(i) for i in step]
        if not where or len(set(where)) != len(where) or min(where) < 0 or max(where) >= len(ops):
            raise ValueError(f"step {k} {tuple(step)}: not distinct positions among {len(ops)} operands")
        taken = [ops[i] for i in where]
        for i in sorted(where, reverse=True):
            del ops[i]
        touched = frozenset().union(*taken)
        for t in taken:
            for c in t:
                count[c] -= 1
        kept = frozenset(c for c in touched if c in out or count.get(c, 0) > 0)
        size = math.prod(sizes[c] for c in touched)
        result = math.prod(sizes[c] for c in kept)
        flops += size
        largest = max(largest, result)
        steps.append((size, kept != touched))
        for c in kept:
            count[c] = count.get(c, 0) + 1
        ops.append(kept)
    if len(ops) > 1:
        raise ValueError(f"the path leaves {len(ops)} operands, not one")
    return Score(flops, largest, steps)


@dataclasses.dataclass
class Row:
    network: str
    family: str
    tensors: int
    finder: str
    budget: float = None
    flops: int = None
    log10_flops: float = None
    log2_size: float = None
    seconds: float = None
    cpu_seconds: float = None
    trials: int = None
    error: str = None
    run: int = 0  # which of `--repeats` runs of a budgeted search
    runs: list = None  # set by `collapse`: every run's log10 flops, when there are several


def collapse(rows) -> list:
    """One row per network, finder and budget: where `--repeats` ran a search several times,
    the run of median flops (the lower of the two middle ones), carrying every run's log10
    flops; a failed run counts as the worst."""
    groups = {}
    for r in rows:
        groups.setdefault((r.network, r.finder, r.budget), []).append(r)
    out = []
    for group in groups.values():
        if len(group) == 1:
            out.append(group[0])
            continue
        ranked = sorted(group, key=lambda r: (r.flops is None, r.flops or 0))
        median = ranked[(len(ranked) - 1) // 2]
        out.append(dataclasses.replace(median, runs=[r.log10_flops for r in ranked if r.flops is not None]))
    return out


def _trials(*objs):
    """The trial count a search object reports, under the names cotengra and others use."""
    for obj in objs:
        for name in ("trials", "n_trials", "num_trials", "ntrials"):
            v = getattr(obj, name, None)
            if callable(v):
                continue
            if isinstance(v, int):
                return v
            if isinstance(v, (list, tuple)):
                return len(v)
    return None


def _seed(seed):
    import numpy as np

    random.seed(seed)
    np.random.seed(seed)


class Finders:
    """Every finder as `name -> run(net, budget, seed) -> (path, trials)`; the imports are
    here so a missing library removes its rows with a note instead of failing the run."""

    def __init__(self):
        self.notes = []
        self.free = {}  # budget-free finders
        self.budgeted = {}  # name -> (budget factor, run)
        try:
            import cgx
        except ImportError:
            cgx = None
            self.notes.append("cgx not installed: no cgx rows")
        if cgx is not None:
            for name in ("greedy", "random-greedy", "auto"):
                self.free[f"cgx {name}"] = self._cgx(cgx, name)
            if hasattr(cgx, "HyperOptimizer"):
                self.budgeted["cgx hyper T/10"] = (0.1, self._cgx_hyper(cgx))
                self.budgeted["cgx hyper T"] = (1.0, self._cgx_hyper(cgx))
            else:
                self.notes.append("cgx has no HyperOptimizer: no cgx hyper rows")
        try:
            import opt_einsum
        except ImportError:
            self.notes.append("opt_einsum not installed: no opt_einsum rows")
        else:
            for name in ("auto", "auto-hq"):
                self.free[f"opt_einsum {name}"] = self._oe(opt_einsum, name)
        try:
            import cotengra
        except ImportError:
            self.notes.append("cotengra not installed: no cotengra rows")
        else:
            self.budgeted["cotengra hyper T"] = (1.0, self._ctg(cotengra))
            from cotengra.hyperoptimizers.hyper import get_default_hq_methods, get_default_optlib

            self.ctg_setup = f"methods {list(get_default_hq_methods())}, tuner {get_default_optlib()}, parallel=False"

    @staticmethod
    def _cgx(cgx, name):
        def run(net, budget, seed):
            path, _ = cgx.contract_path(net.eq, *net.shapes, shapes=True, optimize=name)
            return path, None

        return run

    @staticmethod
    def _cgx_hyper(cgx):
        def run(net, budget, seed):
            opt = cgx.HyperOptimizer(max_time=budget, seed=seed)
            path, info = cgx.contract_path(net.eq, *net.shapes, shapes=True, optimize=opt)
            return path, _trials(opt, info)

        return run

    @staticmethod
    def _oe(oe, name):
        def run(net, budget, seed):
            _seed(seed)
            path, _ = oe.contract_path(net.eq, *net.shapes, shapes=True, optimize=name)
            return path, None

        return run

    @staticmethod
    def _ctg(ctg):
        def run(net, budget, seed):
            _seed(seed)
            # A huge repeat count so the time budget is what stops the search.
            opt = ctg.HyperOptimizer(max_time=budget, max_repeats=10**9, parallel=False, progbar=False)
            path = opt([tuple(t) for t in net.inputs], tuple(net.output), dict(net.sizes))
            return path, len(opt.scores)

        return run


def measure(net, finder, run, budget, seed) -> Row:
    row = Row(net.name, net.family, len(net.inputs), finder, budget)
    try:
        t, c = time.perf_counter(), time.process_time()
        path, trials = run(net, budget, seed)
        row.seconds, row.cpu_seconds = time.perf_counter() - t, time.process_time() - c
        s = score(net.inputs, net.output, net.sizes, path)
    except Exception as e:  # a finder's failure is a result of the benchmark, not its end
        row.error = f"{type(e).__name__}: {str(e)[:120]}"
        return row
    row.flops, row.log10_flops, row.log2_size, row.trials = s.flops, s.log10_flops, s.log2_size, trials
    return row


COLUMNS = ["cgx greedy", "cgx random-greedy", "cgx auto", "cgx hyper T/10", "cgx hyper T",
           "opt_einsum auto", "opt_einsum auto-hq", "cotengra hyper T"]
CGX = [c for c in COLUMNS if c.startswith("cgx")]


def _cell(r: Row, best) -> str:
    if r is None:
        return "–"
    if r.error:
        return f"error ({r.error.split(':')[0]})"
    v = f"{r.log10_flops:.2f}"
    if r.flops == best:
        v = f"**{v}**"
    extra = f"{r.seconds:.2f} s"
    if r.trials is not None:
        extra += f", {r.trials} trial{'' if r.trials == 1 else 's'}"
        if r.seconds > 0:
            extra += f", {r.trials / r.seconds:.2g}/s"
    if r.trials is not None and r.cpu_seconds is not None and r.seconds > 0:
        # A search bounded by wall-clock time had this share of one core.
        extra += f", CPU {100 * r.cpu_seconds / r.seconds:.0f}%"
    if r.runs and len(r.runs) > 1:
        extra += f"; median of {len(r.runs)} runs, {min(r.runs):.2f} to {max(r.runs):.2f}"
    return f"{v} [{r.log2_size:.0f}] ({extra})"


def table(rows, budget, columns) -> list:
    """The markdown table for one budget: the budget-free rows and those of `budget`."""
    lines = []
    names = [c.replace("T/10", f"{budget / 10:g} s").replace(" T", f" {budget:g} s") for c in columns]
    lines.append("| network | tensors | " + " | ".join(names) + " | cgx best ÷ best |")
    lines.append("|---|---:|" + "---|" * len(columns) + "---:|")
    for net in dict.fromkeys(r.network for r in rows):
        mine = {r.finder: r for r in rows if r.network == net and (r.budget is None or r.budget == budget)}
        ok = [r for r in mine.values() if r.flops is not None]
        best = min((r.flops for r in ok), default=None)
        ours = min((r.flops for r in ok if r.finder in CGX), default=None)
        ratio = f"{ours / best:.3g}×" if ours and best else "–"
        first = next(iter(mine.values()))
        lines.append(f"| {net} | {first.tensors} | " + " | ".join(_cell(mine.get(c), best) for c in columns) + f" | {ratio} |")
    return lines


def _ratios(rows, budget, ours, theirs):
    """`ours / theirs` flops per network where both have a path (`ours`: a finder, or several
    of which the best counts)."""
    out = []
    for net in dict.fromkeys(r.network for r in rows):
        def get(name, b):
            for r in rows:
                if r.network == net and r.finder == name and (r.budget is None or r.budget == b) and r.flops:
                    return r
            return None

        mine = [get(n, budget) for n in ([ours] if isinstance(ours, str) else ours)]
        mine = [r for r in mine if r is not None]
        other = get(theirs, budget)
        if mine and other:
            out.append(min(r.flops for r in mine) / other.flops)
    return out


def _share(ratios, limit):
    k = sum(1 for x in ratios if x <= limit)
    return f"{k}/{len(ratios)} ({100 * k / len(ratios):.0f}%)"


def summary(rows, budget, has_hyper) -> list:
    lines = [f"Budget {budget:g} s:"]
    ctg = "cotengra hyper T"
    if has_hyper:
        r = _ratios(rows, budget, "cgx hyper T", ctg)
        if r:
            lines.append(f"- cgx hyper ≤ cotengra's flops on {_share(r, 1.0)} networks (target ≥ 80%); worst ratio {max(r):.3g}× (target ≤ 2×)")
        r = _ratios(rows, budget, "cgx hyper T/10", ctg)
        if r:
            lines.append(f"- cgx hyper at {budget / 10:g} s within 2× of cotengra at {budget:g} s on {_share(r, 2.0)} networks; worst ratio {max(r):.3g}× (target ≤ 2×)")
        tp = _trial_rates(rows, budget, "cgx hyper T", ctg)
        if tp:
            lines.append(f"- trials per second, cgx ÷ cotengra: median {statistics.median(tp):.3g}, range {min(tp):.3g} to {max(tp):.3g}")
    else:
        lines.append("- cgx hyper: absent from this cgx build (no rows)")
    base = ["cgx greedy", "cgx random-greedy", "cgx auto"]
    r = _ratios(rows, budget, base, ctg)
    if r:
        lines.append(f"- baseline, cgx's best of greedy, random-greedy and auto against cotengra at {budget:g} s: "
                     f"≤ on {_share(r, 1.0)} networks, within 2× on {_share(r, 2.0)}; ratio median {statistics.median(r):.3g}×, worst {max(r):.3g}×")
    rates = [x.trials / x.seconds for x in rows if x.finder == ctg and x.budget == budget and x.trials and x.seconds]
    if rates:
        lines.append(f"- cotengra trials per second: median {statistics.median(rates):.3g}, range {min(rates):.3g} to {max(rates):.3g}")
    return lines


def _trial_rates(rows, budget, ours, theirs):
    out = []
    for net in dict.fromkeys(r.network for r in rows):
        rate = {}
        for r in rows:
            if r.network == net and r.budget == budget and r.finder in (ours, theirs) and r.trials and r.seconds:
                rate[r.finder] = r.trials / r.seconds
        if len(rate) == 2:
            out.append(rate[ours] / rate[theirs])
    return out


def auto_summary(rows) -> list:
    r = _ratios(rows, None, "cgx auto", "opt_einsum auto")
    if not r:
        return []
    def times(name):
        t = [x.seconds for x in rows if x.finder == name and x.flops]
        return f"median {statistics.median(t):.2f} s, longest {max(t):.2f} s"

    return [f"'auto': cgx's flops ≤ opt_einsum's on {_share(r, 1.0)} networks (worst ratio {max(r):.3g}×, best {min(r):.3g}×); "
            f"search time cgx {times('cgx auto')}, opt_einsum {times('opt_einsum auto')}"]


def environment(finders) -> list:
    import importlib.metadata as md

    def version(name):
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return "absent"

    vs = ", ".join(f"{p} {version(p)}" for p in ("cgx", "cotengra", "opt_einsum", "kahypar", "optuna", "einsum_benchmark"))
    lines = [f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, Python {platform.python_version()}, "
             f"{os.cpu_count()} cores; {vs}"]
    if hasattr(finders, "ctg_setup"):
        lines.append(f"cotengra HyperOptimizer: {finders.ctg_setup}")
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budgets", default="1,10", help="seconds, comma-separated (default 1,10)")
    p.add_argument("--networks", default=None, help="only networks whose name contains this")
    p.add_argument("--quick", action="store_true", help="a few small networks, budget 1 s")
    p.add_argument("--seed", type=int, default=0, help="the searches' seed")
    p.add_argument("--repeats", type=int, default=1,
                   help="run each budgeted search this many times (seeds SEED, SEED+1, ...) and report the median")
    p.add_argument("--json", default=None, help="write every row here")
    p.add_argument("--render", default=None, metavar="JSON", help="print the tables of a saved --json run, searching nothing")
    a = p.parse_args(argv)
    if a.render:
        with open(a.render) as f:
            saved = json.load(f)
        rows = [Row(**r) for r in saved["rows"]]
        budgets = list(dict.fromkeys(r.budget for r in rows if r.budget is not None))
        print("\n".join(report(rows, budgets, saved["environment"], saved["notes"])))
        return
    budgets = [1.0] if a.quick else [float(b) for b in a.budgets.split(",")]

    finders = Finders()
    notes = nw.families_missing() + finders.notes
    nets = nw.networks(quick=a.quick, contains=a.networks)
    # One untimed call of every finder first, so no row pays for imports, JIT or a
    # thread pool's start.
    warm = nw.Network("warm-up", "", "", ["ab", "bc", "cd", "da", "ae", "ef", "fb"], "", dict.fromkeys("abcdef", 2))
    for name, run in finders.free.items():
        measure(warm, name, run, None, a.seed)
    for name, (factor, run) in finders.budgeted.items():
        measure(warm, name, run, 0.05, a.seed)
    rows = []
    for net in nets:
        bad = nw.check(net)
        if bad:
            raise SystemExit(f"{net.name}: not a valid network: {'; '.join(bad)}")
        print(f"{net.name} ({len(net.inputs)} tensors)", file=sys.stderr, flush=True)
        for name, run in finders.free.items():
            rows.append(measure(net, name, run, None, a.seed))
            _progress(rows[-1])
        done = {}
        for rep in range(a.repeats):
            for budget in budgets:
                for name, (factor, run) in finders.budgeted.items():
                    # cgx at T/10 of one budget may be cgx at T of another: searched once.
                    key = (name.startswith("cgx"), budget * factor, rep)
                    if key not in done:
                        done[key] = measure(net, name, run, budget * factor, a.seed + rep)
                        _progress(done[key])
                    rows.append(dataclasses.replace(done[key], finder=name, budget=budget, run=rep))

    env = environment(finders)
    print("\n".join(report(rows, budgets, env, notes)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"command": " ".join(sys.argv), "environment": env, "notes": notes,
                       "rows": [dataclasses.asdict(r) for r in rows]}, f, indent=1)


def report(rows, budgets, env, notes) -> list:
    rows = collapse(rows)
    out = ["# Path search: cgx against cotengra and opt_einsum", ""]
    out += env + [""] + [f"Note: {n}" for n in notes]
    out += ["", "A cell: log10 multiply-adds [log2 largest intermediate] (search seconds; for a hyper-optimizer its "
            "trials, trials per second and its CPU time over its wall time); bold: the row's lowest flops."]
    has_hyper = any(r.finder.startswith("cgx hyper") for r in rows)
    columns = [c for c in COLUMNS if any(r.finder == c for r in rows)]
    for budget in budgets:
        out += ["", f"## Budget {budget:g} s", ""] + table(rows, budget, columns) + [""] + summary(rows, budget, has_hyper)
    return out + [""] + auto_summary(rows)


def _progress(r: Row):
    what = r.error or f"{r.log10_flops:.2f} in {r.seconds:.2f} s"
    budget = "" if r.budget is None else f" ({r.budget:g} s)"
    print(f"  {r.finder}{budget}: {what}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()

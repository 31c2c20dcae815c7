"""The networks of the path-search benchmark (`paths_hyper.py`): shapes only, no data.

Each network is built, seeded, by a generator of cotengra (`cotengra.utils`) or of the
`einsum_benchmark` package (`einsum_benchmark.generators`), or read from the bundled
instances (`crates/einsum/tests/data/*.json`, fields `format_string` and `shapes`). A family
whose generator's package is not installed is left out, and the benchmark says so.

    python python/bench/networks.py          # the catalogue: name, tensors, labels, source
"""

import dataclasses
import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
INSTANCE_DIR = os.path.join(HERE, "..", "..", "crates", "einsum", "tests", "data")


@dataclasses.dataclass
class Network:
    """A contraction's structure: one string of one-character labels per operand, the
    output's labels, and every label's size."""

    name: str
    family: str
    source: str
    inputs: list
    output: str
    sizes: dict

    @property
    def eq(self) -> str:
        return ",".join(self.inputs) + "->" + self.output

    @property
    def shapes(self) -> list:
        return [tuple(self.sizes[c] for c in term) for term in self.inputs]


def check(net: Network) -> list:
    """What is wrong with `net` as an einsum of these shapes (an empty list when nothing):
    a label's size must agree across operands and be positive, labels must be single
    characters that the equation syntax leaves free, and the output must name each of its
    labels once, each found in some operand."""
    problems = []
    seen = {}
    for k, term in enumerate(net.inputs):
        for c in term:
            if len(c) != 1 or c in ",->. ":
                problems.append(f"operand {k}: label {c!r} is not one free character")
            if c not in net.sizes or int(net.sizes[c]) < 1:
                problems.append(f"operand {k}: label {c!r} has no positive size")
            seen.setdefault(c, set()).add(net.sizes.get(c))
    for c, found in seen.items():
        if len(found) != 1:
            problems.append(f"label {c!r} has several sizes {sorted(found)}")
    if len(set(net.output)) != len(net.output):
        problems.append(f"output {net.output!r} repeats a label")
    for c in net.output:
        if c not in seen:
            problems.append(f"output label {c!r} is in no operand")
    return problems


def _from_eq(name, family, source, eq, shapes):
    """A network from an equation and its operands' shapes, checking that every label has
    one size (the sizes are read from the shapes, so a disagreement is found here)."""
    lhs, out = eq.replace(" ", "").split("->")
    inputs = lhs.split(",")
    if len(inputs) != len(shapes):
        raise ValueError(f"{name}: {len(inputs)} operands in the equation but {len(shapes)} shapes")
    sizes = {}
    for k, (term, shape) in enumerate(zip(inputs, shapes)):
        if len(term) != len(shape):
            raise ValueError(f"{name}: operand {k} has labels {term!r} but shape {tuple(shape)}")
        for c, d in zip(term, shape):
            if sizes.setdefault(c, int(d)) != int(d):
                raise ValueError(f"{name}: label {c!r} has sizes {sizes[c]} and {d}")
    return Network(name, family, source, inputs, out, sizes)


def _from_contraction(name, family, source, con):
    """A network from cotengra's `Contraction` (inputs, output, shapes, size_dict): read from
    the generator's shapes, as the einsum_benchmark ones are, so both are checked alike."""
    eq = ",".join("".join(term) for term in con.inputs) + "->" + "".join(con.output)
    return _from_eq(name, family, source, eq, con.shapes)


def _dims(dims, d_min, d_max):
    bonds = f"bond {d_min}" if d_min == d_max else f"bonds {d_min}-{d_max}"
    return "x".join(map(str, dims)) + " " + bonds


# Each entry: (maker, small); `--quick` takes the small ones.
def _catalogue():
    # Imports deferred and optional: the tests import this module where neither is installed.
    try:
        import cotengra.utils as cu
    except ImportError:
        cu = None
    try:
        import einsum_benchmark.generators as eb
    except ImportError:
        eb = None
    entries = []
    if cu is not None:
        entries += _cotengra_entries(cu)
    if eb is not None:
        entries += _einsum_benchmark_entries(eb)
    return entries


def _cotengra_entries(cu):
    def ctg_regular(n, reg, seed):
        return lambda: _from_contraction(
            f"ctg randreg d={reg} n={n} bond 2", "random regular", "cotengra.utils.randreg_equation",
            cu.randreg_equation(n, reg, d_min=2, d_max=2, seed=seed))

    def ctg_lattice(dims, d_min, d_max, seed):
        return lambda: _from_contraction(
            f"ctg lattice {_dims(dims, d_min, d_max)}", f"{len(dims)}D lattice", "cotengra.utils.lattice_equation",
            cu.lattice_equation(dims, d_min=d_min, d_max=d_max, seed=seed))

    def ctg_hyper(n, reg, n_hyper_in, n_out, seed):
        return lambda: _from_contraction(
            f"ctg rand hyper n={n} reg={reg} hyper={n_hyper_in} out={n_out}", "random hypergraph",
            "cotengra.utils.rand_equation",
            cu.rand_equation(n, reg, n_out=n_out, n_hyper_in=n_hyper_in, d_min=2, d_max=3, seed=seed))

    return [
        (ctg_regular(60, 3, 1), True),
        (ctg_regular(120, 3, 1), False),
        (ctg_regular(250, 3, 1), False),
        (ctg_regular(500, 3, 1), False),
        (ctg_regular(60, 4, 1), False),
        (ctg_regular(100, 4, 1), False),
        (ctg_regular(250, 4, 1), False),
        (ctg_lattice((8, 8), 2, 3, 1), True),
        (ctg_lattice((12, 12), 2, 3, 1), False),
        (ctg_lattice((20, 20), 2, 3, 1), False),
        (ctg_lattice((5, 5, 5), 2, 3, 1), False),
        (ctg_hyper(30, 3, 4, 2, 1), True),
        (ctg_hyper(100, 3, 10, 0, 1), False),
    ]


def _einsum_benchmark_entries(eb):
    def eb_regular(n, reg, seed):
        return lambda: _from_eq(
            f"eb regular d={reg} n={n} bond 2", "random regular", "einsum_benchmark.generators.random.regular",
            *eb.random.regular(n, reg, d_min=2, d_max=2, seed=seed))

    def eb_lattice(dims, d_min, d_max, seed):
        return lambda: _from_eq(
            f"eb lattice {_dims(dims, d_min, d_max)}", f"{len(dims)}D lattice",
            "einsum_benchmark.generators.structured.lattice",
            *eb.structured.lattice(list(dims), d_min=d_min, d_max=d_max, seed=seed))

    def eb_hyper(n, regularity, max_edge_order, n_out, seed):
        return lambda: _from_eq(
            f"eb hypernetwork n={n} reg={regularity} order<={max_edge_order} out={n_out}", "random hypergraph",
            "einsum_benchmark.generators.random.connected_hypernetwork",
            *eb.random.connected_hypernetwork(
                number_of_tensors=n, regularity=regularity, max_edge_order=max_edge_order,
                number_of_output_indices=n_out, min_axis_size=2, max_axis_size=3, seed=seed))

    def eb_maxcut(n, reg, p, seed):
        # One amplitude of a QAOA Max-Cut circuit as quimb builds it, unsimplified: the
        # rank-1 to rank-4 state and gate tensors a circuit simulator starts from.
        def make():
            eq, arrays = eb.quantum_computing.maxcut(n=n, reg=reg, p=p, seed=seed)
            return _from_eq(
                f"eb QAOA maxcut n={n} d={reg} p={p}", "circuit", "einsum_benchmark.generators.quantum_computing.maxcut",
                eq, [a.shape for a in arrays])
        return make

    entries = [
        (eb_regular(200, 3, 2), False),
        (eb_lattice((16, 16), 2, 2, 2), False),
        (eb_hyper(40, 2.5, 3, 0, 2), True),
        (eb_hyper(150, 3.0, 3, 2, 2), False),
    ]
    try:
        import quimb  # noqa: F401  (the circuit generator needs it)
    except ImportError:
        pass
    else:
        entries += [
            (eb_maxcut(16, 3, 2, 1), True),
            (eb_maxcut(24, 3, 3, 1), False),
            (eb_maxcut(40, 3, 2, 1), False),
        ]
    return entries


def shared_instances() -> list:
    """The bundled instances, by file name."""
    nets = []
    for path in sorted(glob.glob(os.path.join(INSTANCE_DIR, "*.json"))):
        base = os.path.basename(path)
        with open(path) as f:
            d = json.load(f)
        nets.append(_from_eq(d.get("name", base[:-5]), "shared instance", base, d["format_string"], d["shapes"]))
    return nets


def families_missing() -> list:
    """The packages whose absence leaves a family out."""
    missing = []
    for module, what in [("cotengra", "cotengra's generators"), ("einsum_benchmark", "einsum_benchmark's generators"),
                         ("quimb", "the circuit networks (einsum_benchmark's maxcut builds them with quimb)")]:
        try:
            __import__(module)
        except ImportError:
            missing.append(f"{module} not installed: no {what}")
    return missing


def networks(quick=False, contains=None) -> list:
    """The benchmark's networks, generated in catalogue order; with `quick` the small ones
    only; with `contains`, those whose name contains it (case-insensitive)."""
    nets = [make() for make, small in _catalogue() if small or not quick]
    instances = shared_instances()
    if quick:
        instances = [n for n in instances if len(n.inputs) <= 30]
    nets += instances
    if contains:
        nets = [n for n in nets if contains.lower() in n.name.lower()]
    return nets


if __name__ == "__main__":
    for msg in families_missing():
        print(msg, file=sys.stderr)
    for net in networks():
        bad = check(net)
        print(f"{net.name:48s} {len(net.inputs):5d} tensors {len(net.sizes):5d} labels  {net.source}{'  INVALID: ' + '; '.join(bad) if bad else ''}")

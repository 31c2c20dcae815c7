#!/usr/bin/env python3
"""Writes the queens graphical-model network of issue 40 as an Einsum Benchmark instance.

One 3×3 matrix per edge of the queen's graph on an n×n board (two cells are joined when a
queen on one attacks the other: same row, column or diagonal), one label of size 3 per
cell, a scalar output: on the 5×5 board, 160 matrices over 25 labels. `--fix CELLS`
conditions on cells (numbered row by row from 0): their labels are dropped, so the edge
matrices touching them become vectors. The 5×5 board's queen graph has treewidth 18, so
the whole network needs an intermediate of 3^18 elements (3.1 GB in float64); fixing
cells 6, 12 and 18 brings the greedy path's largest intermediate to 3^15 (115 MB).

The path stored as both `opt_flops` and `opt_size` is opt_einsum's greedy one (it is
deterministic); operands come from `cgx einsum FILE --seed N`, as for any instance.

    pip install numpy opt_einsum
    python3 benches/scripts/gm_queens.py --fix 6,12,18 -o gm_queens.json
    cgx einsum gm_queens.json --repeat 3 --threads 1 --json
"""
import argparse
import json

import numpy as np
import opt_einsum as oe


def network(n, fixed):
    cells = [(r, c) for r in range(n) for c in range(n)]
    edges = [
        (i, j)
        for i, (r1, c1) in enumerate(cells)
        for j, (r2, c2) in enumerate(cells)
        if j > i and (r1 == r2 or c1 == c2 or abs(r1 - r2) == abs(c1 - c2))
    ]
    label = [oe.get_symbol(i) for i in range(len(cells))]
    terms = ["".join(label[x] for x in edge if x not in fixed) for edge in edges]
    return ",".join(terms) + "->", [[3] * len(t) for t in terms]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--board", type=int, default=5)
    ap.add_argument("--fix", default="", help="cells to condition on, e.g. 6,12,18")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    fixed = {int(x) for x in args.fix.split(",") if x}
    expr, shapes = network(args.board, fixed)
    path, info = oe.contract_path(expr, *[np.empty(s) for s in shapes], optimize="greedy")
    name = f"gm_queens_{args.board}x{args.board}_3" + ("_fix" + "_".join(map(str, sorted(fixed))) if fixed else "")
    steps = {"path": [list(s) for s in path]}
    out = {"name": name, "format_string": expr, "shapes": shapes, "dtype": "float64",
           "paths": {"opt_flops": steps, "opt_size": steps}}
    with open(args.output, "w") as f:
        json.dump(out, f)
    print(f"{name}: {len(shapes)} tensors, largest intermediate 2^{np.log2(float(info.largest_intermediate)):.1f}")


if __name__ == "__main__":
    main()

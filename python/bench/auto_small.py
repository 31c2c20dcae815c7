"""opt_einsum's `auto` on the small networks of the einsum crate's `auto_small` example:
the search time (median of five runs, in milliseconds) and log10 of its path's
multiply-adds, counted as the crate counts them (the sum over pairwise steps of the
product of the sizes of every label the step touches, after labels one operand alone
holds are summed out of it).

    cargo run --release -p einsum --example auto_small -- --export small.json
    python python/bench/auto_small.py small.json
"""

import json
import math
import statistics
import sys
import time

from opt_einsum import contract_path, get_symbol


def multiply_adds(inputs, output, sizes, path):
    """The crate's count (`einsum::search::path_cost`) along an opt_einsum path."""
    holders = {}
    for labels in inputs:
        for c in set(labels):
            holders[c] = holders.get(c, 0) + 1
    out = set(output)
    total = 0.0
    ops = []
    for labels in inputs:
        own = [c for c in set(labels) if holders[c] == 1 and c not in out and sizes[c] > 1]
        if own and len(inputs) > 1:
            total += math.prod(sizes[c] for c in set(labels))
            ops.append(set(labels) - set(own))
        else:
            ops.append(set(labels))
    count = {}
    for o in ops:
        for c in o:
            count[c] = count.get(c, 0) + 1
    for step in path:
        taken = [ops[p] for p in step]
        for p in sorted(step, reverse=True):
            del ops[p]
        union = set().union(*taken)
        total += math.prod(sizes[c] for c in union)
        for o in taken:
            for c in o:
                count[c] -= 1
        result = {c for c in union if c in out or count[c] > 0}
        for c in result:
            count[c] += 1
        ops.append(result)
    return total


def main(file):
    networks = json.load(open(file))
    print("| network | tensors | opt_einsum auto ms (median of 5) | log10 multiply-adds |")
    print("|---|---:|---:|---:|")
    for net in networks:
        inputs, output, sizes = net["inputs"], net["output"], net["sizes"]
        eq = ",".join("".join(get_symbol(c) for c in l) for l in inputs)
        eq += "->" + "".join(get_symbol(c) for c in output)
        shapes = [tuple(sizes[c] for c in l) for l in inputs]
        times = []
        for _ in range(5):
            t = time.perf_counter()
            path, _ = contract_path(eq, *shapes, optimize="auto", shapes=True)
            times.append((time.perf_counter() - t) * 1e3)
        cost = multiply_adds(inputs, output, sizes, path)
        print(f"| {net['name']} | {len(inputs)} | {statistics.median(times):.1f} | {math.log10(cost):.3f} |")


if __name__ == "__main__":
    main(sys.argv[1])

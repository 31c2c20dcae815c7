"""opt_einsum's path finders on the six shared instances, for comparison with the einsum
crate's searches (`cargo run --release -p einsum --example paths`): flops (opt_einsum's
count, which for these instances equals twice the multiply-adds the crate counts) and the
search time in seconds.

    python python/bench/paths_opt_einsum.py [file.json ...]
"""

import glob
import json
import os
import sys
import time

from opt_einsum import contract_path

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "crates", "einsum", "tests", "data")


def main(files):
    print("| instance | stored opt_flops | greedy | random-greedy (s) | dp (s) |")
    print("|---|---:|---:|---:|---:|")
    for f in files:
        d = json.load(open(f))
        eq, shapes = d["format_string"], [tuple(s) for s in d["shapes"]]

        def cost(optimize):
            t = time.perf_counter()
            _, info = contract_path(eq, *shapes, optimize=optimize, shapes=True)
            return float(info.opt_cost), time.perf_counter() - t

        stored = cost([tuple(p) for p in d["paths"]["opt_flops"]["path"]])[0]
        greedy = cost("greedy")[0]
        rg, dp = cost("random-greedy"), cost("dp")
        print(f"| {d['name']} | {stored:.4e} | {greedy:.4e} | {rg[0]:.4e} ({rg[1]:.2f}) | {dp[0]:.4e} ({dp[1]:.2f}) |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or sorted(glob.glob(os.path.join(DATA, "*.json"))))

# Task runner twins of the plain cargo commands (`cargo install just`).

# The main job: `cgx demo` (the worked example, its derivatives, a 10^6-node DAG).
run nodes="1000000":
    cargo run --release -p cgx -- demo --nodes {{nodes}}

# The large-DAG benchmark from the command line: `just dag chain 10000000`.
dag shape="window" nodes="1000000":
    cargo run --release -p cgx -- bench dag --shape {{shape}} --nodes {{nodes}}

# The einsum benchmark instances at full size (docs/SPEC.md §8.3), with gradients.
einsum-instances:
    cargo run --release -p einsum --example instances -- --grad

# Microseconds per contraction step on small-tensor graphs (docs/SPEC.md §8.2).
einsum-steps:
    cargo run --release -p benches --bin einsum_steps

# One small program per pipeline of docs/SPEC.md §5.3 (JVP, VJP, forward over forward, HVP,
# n-th derivative), every phase spelled out and checked against closed forms.
examples:
    for e in jvp vjp forward_over_forward hvp nth_derivative; do cargo run -q -p examples --example $e; done

# Criterion: MPS steps beside their kernels alone, and each instance's forward beside its gradient.
einsum-bench:
    CG_EINSUM_INSTANCES=all cargo bench -p benches --bench einsum

# numpy + opt_einsum side by side, sections B and C (needs numpy and opt_einsum).
einsum-compare:
    cargo build --release -p cgx
    python3 benches/scripts/compare_einsum.py

# Every test, including doc tests.
test:
    cargo test --workspace

# What CI runs.
ci:
    bash .ci/run

# The criterion benches (set CG_BENCH_SIZES=10000,100000 to choose sizes).
bench:
    cargo bench -p benches

# Scaling of every pipeline phase from 10^4 to 10^7 on memory the process already holds
# (glibc keeps freed memory mapped, so no size pays first-touch page faults; see
# docs/PERFORMANCE.md). About 6 minutes.
bench-scaling:
    GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=4294967295 CG_BENCH_SIZES=10000,10000000 cargo bench -p benches --bench pipeline -- '^(build|resolve_materialize|compile|eval)/'

lint:
    cargo fmt --all --check
    cargo clippy --workspace --all-targets -- -D warnings

# Run one fuzz target (nightly + `cargo install cargo-fuzz`): `just fuzz pipeline 60`.
fuzz target seconds="60":
    cd fuzz && cargo +nightly fuzz run {{target}} corpus/{{target}} seeds/{{target}} -- -max_total_time={{seconds}}

# Miri over the crate's unsafe (the parallel evaluator's in-place slot writes, the sequential
# evaluator's verified unchecked reads): a periodic check, about four minutes (nightly +
# `rustup component add miri rust-src --toolchain nightly`).
miri:
    PROPTEST_CASES=3 MIRIFLAGS="-Zmiri-disable-isolation -Zmiri-tree-borrows -Zmiri-permissive-provenance -Zmiri-deterministic-floats -Zmiri-ignore-leaks" cargo +nightly miri test -p computegraph --test it -- drops:: parallel:: pipeline::one_output_of_sincos pipeline::same_output_requested_twice pipeline::zero_input_constants pipeline::inputs_as_outputs pipeline::compiled_eval_matches_reference errors::operation_returning_wrong_output_count
    MIRIFLAGS="-Zmiri-disable-isolation -Zmiri-tree-borrows -Zmiri-permissive-provenance -Zmiri-deterministic-floats -Zmiri-ignore-leaks" cargo +nightly miri test -p computegraph --lib eval::tests

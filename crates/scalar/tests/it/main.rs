//! Integration tests of `scalar`. This binary holds only the eager scale test, which
//! reads the process's resident set size: no other test may run beside it in the same
//! process, so it does not share `tidu`'s test binary.

mod eager_scale;

//! Integration tests of `scalar`. This binary holds only the eager scale test, which
//! reads the process's resident set size: no other test may run beside it in the same
//! process, so it shares no binary with the `ad` and `engine` tests.

mod eager_scale;

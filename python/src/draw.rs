//! `tree_svg`: the contraction tree of a path as SVG (`einsum::draw::tree_svg`), for
//! `PathInfo.plot`.

use pyo3::prelude::*;

use crate::einsum_error;

/// The SVG document of the contraction tree of `path` on `eq` with `shapes`; `sliced` are
/// the labels a sliced plan fixes per slice.
#[pyfunction]
pub fn tree_svg(eq: &str, shapes: Vec<Vec<usize>>, path: Vec<Vec<usize>>, sliced: Vec<char>) -> PyResult<String> {
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let net =
        einsum::Subscripts::parse(eq).and_then(|s| s.resolve(&refs)).map_err(einsum_error)?.squeeze_broadcast(&refs);
    let path = einsum::ContractionPath::from_steps(path);
    let sliced: Vec<u32> = net
        .names
        .iter()
        .enumerate()
        .filter(|(_, n)| n.is_some_and(|c| sliced.contains(&c)))
        .map(|(i, _)| i as u32)
        .collect();
    einsum::draw::tree_svg(&net, &path, &sliced).map_err(einsum_error)
}

//! A picture of a contraction plan: [`tree_svg`] draws the contraction tree of a path as
//! SVG (through the `svg` crate's document model), for `cgx einsum --plot` and Python's
//! `PathInfo.plot`.
//!
//! Layout: the inputs along the bottom in the order a depth-first walk of the tree meets
//! them, each step above its two operands at the mean of their positions, at a height
//! given by the longest chain of steps below it, so the root is at the top and
//! independent branches sit side by side. Each step is a circle whose area grows with the
//! log of its multiply-adds and whose color is the log of its result's size (from dark blue,
//! small, to yellow, the largest of the plan); an edge carrying a sliced label is dashed
//! red. Each circle has a tooltip (an SVG `title`) with its labels and figures. A legend
//! gives the totals.
//!
//! Complexity: one walk of the path (`FollowedPath`), then `O(n)` elements for `n` inputs;
//! the heights are computed in step order, children first, so nothing recurses.

use std::fmt::Write as _;

use svg::Document;
use svg::node::element::{Circle, Line, Rectangle, Text, Title};

use crate::error::EinsumResult;
use crate::path::{ContractionPath, FollowedPath, PathOperand};
use crate::subscripts::LabelledNetwork;

/// Width and height of the drawing area, in pixels.
const WIDTH: f64 = 1000.0;
const HEIGHT: f64 = 560.0;
const MARGIN: f64 = 40.0;

/// The contraction tree of `path` on `network` as an SVG document (see the module docs);
/// `sliced` are the labels a sliced plan fixes per slice.
///
/// ```
/// use einsum::{ContractionPath, Subscripts};
/// use einsum::draw::tree_svg;
///
/// let shapes: [&[usize]; 3] = [&[2, 30], &[30, 40], &[40, 2]];
/// let net = Subscripts::parse("ij,jk,kl->il").unwrap().resolve(&shapes).unwrap();
/// let svg = tree_svg(&net, &ContractionPath::new(vec![[1, 2], [0, 1]]), &[]).unwrap();
/// assert!(svg.starts_with("<svg") && svg.matches("<circle").count() == 2);
/// ```
pub fn tree_svg(network: &LabelledNetwork, path: &ContractionPath, sliced: &[u32]) -> EinsumResult<String> {
    let followed = FollowedPath::new(&network.inputs, &network.output, path)?;
    let n = network.inputs.len();
    let steps = followed.steps();
    let size = |labels: &[u32]| labels.iter().map(|&c| network.sizes[c as usize] as f64).product::<f64>();
    let name = |c: u32| network.names.get(c as usize).copied().flatten().map_or(format!("#{c}"), |ch| ch.to_string());
    let is_sliced = |labels: &[u32]| labels.iter().any(|c| sliced.contains(c));
    // Children of each step's result, and the height of every operand (inputs 0).
    let total = n + steps.len();
    let mut kids: Vec<Option<[PathOperand; 2]>> = vec![None; total];
    let mut height = vec![0usize; total];
    for step in steps {
        let r = step.result.index();
        kids[r] = Some(step.operands);
        height[r] = 1 + step.operands.iter().map(|o| height[o.index()]).max().unwrap_or(0);
    }
    // Inputs in the order a depth-first walk from the root meets them (inputs no step
    // reaches, in a one-operand network, keep their own order).
    let root = steps.last().map_or(0, |s| s.result.index());
    let mut x = vec![0.0f64; total];
    let mut order = Vec::with_capacity(n);
    let mut stack = vec![root];
    while let Some(v) = stack.pop() {
        match kids[v] {
            Some([a, b]) => {
                stack.push(b.index());
                stack.push(a.index());
            }
            None => order.push(v),
        }
    }
    let mut met = vec![false; total];
    order.iter().for_each(|&i| met[i] = true);
    (0..n).filter(|&i| !met[i]).for_each(|i| order.push(i));
    let dx = (WIDTH - 2.0 * MARGIN) / (order.len().max(2) - 1) as f64;
    for (k, &i) in order.iter().enumerate() {
        x[i] = MARGIN + k as f64 * dx;
    }
    for step in steps {
        let [a, b] = step.operands;
        x[step.result.index()] = (x[a.index()] + x[b.index()]) / 2.0;
    }
    let top = height.iter().copied().max().unwrap_or(0).max(1) as f64;
    let y = |v: usize| HEIGHT - MARGIN - (HEIGHT - 2.0 * MARGIN) * height[v] as f64 / top;
    // Figures per step: multiply-adds and the result's size.
    let flops: Vec<f64> = steps.iter().map(|s| size(&followed.loops(s))).collect();
    let results: Vec<f64> = steps.iter().map(|s| size(followed.labels(s.result))).collect();
    let max_flops = flops.iter().copied().fold(1.0, f64::max).log10().max(1.0);
    let max_size = results.iter().copied().fold(2.0, f64::max).log2().max(1.0);

    let mut doc = Document::new()
        .set("viewBox", (0, 0, WIDTH, HEIGHT + 60.0))
        .set("width", WIDTH)
        .set("height", HEIGHT + 60.0)
        .set("font-family", "sans-serif")
        .add(Rectangle::new().set("width", "100%").set("height", "100%").set("fill", "white"));
    for step in steps {
        let r = step.result.index();
        for o in step.operands {
            let labels = followed.labels(o);
            let cut = is_sliced(labels);
            doc = doc.add(
                Line::new()
                    .set("x1", x[o.index()])
                    .set("y1", y(o.index()))
                    .set("x2", x[r])
                    .set("y2", y(r))
                    .set("stroke", if cut { "#c0392b" } else { "#888" })
                    .set("stroke-width", if cut { 1.5 } else { 1.0 })
                    .set("stroke-dasharray", if cut { "4 3" } else { "none" }),
            );
        }
    }
    for (i, input) in network.inputs.iter().enumerate() {
        let labels: Vec<String> = input.iter().map(|&c| name(c)).collect();
        doc = doc.add(
            Rectangle::new()
                .set("x", x[i] - 2.5)
                .set("y", y(i) - 2.5)
                .set("width", 5)
                .set("height", 5)
                .set("fill", "#444")
                .add(Title::new(format!("operand {i}: {}", labels.join(" ")))),
        );
    }
    for (s, step) in steps.iter().enumerate() {
        let r = step.result.index();
        let radius = 2.0 + 8.0 * (flops[s].max(1.0).log10() / max_flops).sqrt();
        let labels: Vec<String> = followed.labels(step.result).iter().map(|&c| name(c)).collect();
        let mut tip = format!("step {s}: {:.3e} multiply-adds, result of {:.3e} elements", flops[s], results[s]);
        if !labels.is_empty() {
            let _ = write!(tip, " ({})", labels.join(" "));
        }
        doc = doc.add(
            Circle::new()
                .set("cx", x[r])
                .set("cy", y(r))
                .set("r", radius)
                .set("fill", color(results[s].max(1.0).log2() / max_size))
                .set("stroke", "#222")
                .set("stroke-width", 0.5)
                .add(Title::new(tip)),
        );
    }
    let total_flops: f64 = flops.iter().sum();
    let largest = results.iter().copied().fold(0.0, f64::max);
    let mut legend = format!(
        "{n} operands, {} steps, {total_flops:.3e} multiply-adds, largest intermediate {largest:.3e} elements",
        steps.len()
    );
    if !sliced.is_empty() {
        let names: Vec<String> = sliced.iter().map(|&c| name(c)).collect();
        let _ = write!(legend, " (of the unsliced tree); sliced on {} (dashed edges)", names.join(", "));
    }
    doc = doc.add(Text::new(legend).set("x", MARGIN).set("y", HEIGHT + 20.0).set("font-size", 13)).add(
        Text::new(
            "circle area: log multiply-adds of the step; color: log size of its result (blue small, yellow large)",
        )
        .set("x", MARGIN)
        .set("y", HEIGHT + 42.0)
        .set("font-size", 11)
        .set("fill", "#555"),
    );
    Ok(doc.to_string())
}

/// A color from dark blue (`t = 0`) through teal and green to yellow (`t = 1`).
fn color(t: f64) -> String {
    const STOPS: [(f64, f64, f64); 4] =
        [(48.0, 18.0, 120.0), (33.0, 145.0, 140.0), (94.0, 201.0, 98.0), (253.0, 231.0, 37.0)];
    let t = t.clamp(0.0, 1.0) * (STOPS.len() - 1) as f64;
    let i = (t.floor() as usize).min(STOPS.len() - 2);
    let f = t - i as f64;
    let mix = |a: f64, b: f64| (a + (b - a) * f).round() as u8;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    format!("#{:02x}{:02x}{:02x}", mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Subscripts;

    #[test]
    fn a_sliced_ring_is_drawn_with_one_circle_per_step_and_dashed_sliced_edges() {
        let shapes: Vec<&[usize]> = vec![&[3, 3]; 6];
        let net = Subscripts::parse("ab,bc,cd,de,ef,fa->").unwrap().resolve(&shapes).unwrap();
        let path = ContractionPath::new(vec![[0, 1], [0, 1], [0, 1], [0, 1], [0, 1]]);
        let a = net.names.iter().position(|&c| c == Some('a')).unwrap() as u32;
        let svg = tree_svg(&net, &path, &[a]).unwrap();
        assert_eq!(svg.matches("<circle").count(), 5);
        assert_eq!(svg.matches("<rect").count(), 1 + 6);
        // Label `a` is held by operands 0 and 5 and by every result until the last step.
        assert!(svg.matches("stroke-dasharray=\"4 3\"").count() >= 2);
        assert!(svg.contains("sliced on a"));
        // The unsliced drawing has no dashed edge.
        let plain = tree_svg(&net, &path, &[]).unwrap();
        assert!(!plain.contains("stroke-dasharray=\"4 3\""));
        // A bad path is an error, not a drawing.
        assert!(tree_svg(&net, &ContractionPath::new(vec![[0, 9]]), &[]).is_err());
    }

    #[test]
    fn colors_run_from_blue_to_yellow() {
        assert_eq!(color(0.0), "#301278");
        assert_eq!(color(1.0), "#fde725");
        assert_eq!(color(7.0), color(1.0));
    }
}

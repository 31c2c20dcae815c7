//! The plain reference: one loop over every assignment of every label, no strides, no
//! reordering, broadcasting by reading index 0 of a size-1 axis. Trivially correct and slow
//! (the product of all label sizes); tests compare the kernels and the contraction graphs
//! with it. Ellipses and broadcast sizes come from [`Subscripts::resolve`].

use crate::elem::Elem;
use crate::error::{EinsumError, EinsumResult};
use crate::subscripts::Subscripts;
use crate::tensor::Tensor;

/// Refuses references of more than this many label assignments.
pub(crate) const REFERENCE_MAX_ITERATIONS: u128 = 1 << 32;

/// Evaluates `expression` on `operands` by brute force.
///
/// ```
/// use einsum::{reference_einsum, Tensor};
/// let a = Tensor::new(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
/// let t = reference_einsum("ii->", &[&a]).unwrap();
/// assert_eq!(t.get(&[]), Some(5.0));
/// ```
pub fn reference_einsum<T: Elem>(expression: &str, operands: &[&Tensor<T>]) -> EinsumResult<Tensor<T>> {
    let s = Subscripts::parse(expression)?;
    let shapes: Vec<&[usize]> = operands.iter().map(|t| t.shape()).collect();
    let n = s.resolve(&shapes)?;
    let ops: Vec<(&Tensor<T>, &[u32])> = operands.iter().copied().zip(n.inputs.iter().map(Vec::as_slice)).collect();
    brute_force(&ops, &n.output, &n.sizes)
}

/// The reference on numeric labels (`labels[i] < sizes.len()`), in the general form the
/// primitives use: repeated labels in an operand read its diagonal, repeated output labels
/// write the output's diagonal (zeros elsewhere), output labels in no operand broadcast, and
/// operand labels not in the output are summed. Sizes of labels that occur nowhere are
/// ignored.
///
/// ```
/// use einsum::{reference_labels, Tensor};
///
/// // Labels 0 and 1 (sizes 2 and 3): the diagonal-free product `ij,j->i` written with numbers.
/// let m = Tensor::from_fn(vec![2, 3], |i| (i[0] * 3 + i[1]) as f64).unwrap();
/// let v = Tensor::new(vec![3], vec![1.0, 1.0, 1.0]).unwrap();
/// let r = reference_labels(&[(&m, &[0, 1][..]), (&v, &[1][..])], &[0], &[2, 3]).unwrap();
/// assert_eq!(r.data(), &[3.0, 12.0]);
/// ```
pub fn reference_labels<T: Elem>(
    operands: &[(&Tensor<T>, &[u32])],
    out: &[u32],
    sizes: &[usize],
) -> EinsumResult<Tensor<T>> {
    for (i, (t, l)) in operands.iter().enumerate() {
        let expected: Option<Vec<usize>> = l.iter().map(|&c| sizes.get(c as usize).copied()).collect();
        if expected.as_deref() != Some(t.shape()) {
            return Err(EinsumError::Shape(format!("reference: operand {i} has shape {:?}, labels {l:?}", t.shape())));
        }
    }
    brute_force(operands, out, sizes)
}

/// [`reference_labels`] with numpy's broadcasting: an operand axis of size 1 whose label is
/// larger reads its one entry for every value of the label.
fn brute_force<T: Elem>(operands: &[(&Tensor<T>, &[u32])], out: &[u32], sizes: &[usize]) -> EinsumResult<Tensor<T>> {
    for (i, (t, l)) in operands.iter().enumerate() {
        let fits = l.len() == t.rank()
            && l.iter().zip(t.shape()).all(|(&c, &d)| sizes.get(c as usize).is_some_and(|&s| d == s || d == 1));
        if !fits {
            return Err(EinsumError::Shape(format!("reference: operand {i} has shape {:?}, labels {l:?}", t.shape())));
        }
    }
    let out_shape: Option<Vec<usize>> = out.iter().map(|&c| sizes.get(c as usize).copied()).collect();
    let out_shape = out_shape.ok_or_else(|| EinsumError::Shape(format!("reference: output labels {out:?}")))?;
    // Only labels that occur are looped over (a size given for an unused label is ignored).
    let mut used: Vec<usize> = operands.iter().flat_map(|(_, l)| l.iter()).chain(out).map(|&c| c as usize).collect();
    used.sort_unstable();
    used.dedup();
    let total: u128 = used.iter().map(|&c| sizes[c] as u128).product();
    if total > REFERENCE_MAX_ITERATIONS {
        return Err(EinsumError::Shape(format!("reference: {total} label assignments is too many")));
    }
    let mut result = Tensor::zeros(out_shape.clone())?.data().to_vec();
    let mut assignment = vec![0usize; sizes.len()];
    let offset = |shape: &[usize], labels: &[u32], a: &[usize]| {
        // A broadcast axis (size 1) reads index 0.
        labels.iter().zip(shape).fold(0usize, |off, (&c, &d)| off * d + if d == 1 { 0 } else { a[c as usize] })
    };
    for _ in 0..total {
        let mut p = T::one();
        for (t, l) in operands {
            p = p * t.data()[offset(t.shape(), l, &assignment)];
        }
        result[offset(&out_shape, out, &assignment)] += p;
        for &k in used.iter().rev() {
            assignment[k] += 1;
            if assignment[k] < sizes[k] {
                break;
            }
            assignment[k] = 0;
        }
    }
    // Repeated output labels: only the diagonal was written, as intended.
    Tensor::new(out_shape, result)
}

/// A smooth, seeded test tensor (`sin(0.37·(start + k))` for its `k`-th element, from 1):
/// the operands of the kernels' unit tests.
#[cfg(test)]
pub(crate) fn ramp_from(shape: Vec<usize>, start: f64) -> Tensor<f64> {
    let mut x = start;
    Tensor::from_fn(shape, |_| {
        x += 1.0;
        (x * 0.37f64).sin()
    })
    .expect("a test tensor's size fits")
}

/// [`ramp_from`] starting at 0.
#[cfg(test)]
pub(crate) fn ramp(shape: Vec<usize>) -> Tensor<f64> {
    ramp_from(shape, 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_known_cases() {
        let a = Tensor::new(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
        let b = Tensor::new(vec![2, 2], vec![5.0, 6.0, 7.0, 8.0]).unwrap();
        let c = reference_einsum("ij,jk->ik", &[&a, &b]).unwrap();
        assert_eq!(c.data(), &[19.0, 22.0, 43.0, 50.0]);
        let t = reference_einsum("ij->ji", &[&a]).unwrap();
        assert_eq!(t.data(), &[1.0, 3.0, 2.0, 4.0]);
        let d = reference_einsum("ii->i", &[&a]).unwrap();
        assert_eq!(d.data(), &[1.0, 4.0]);
        let s = reference_einsum("ij,ij", &[&a, &b]).unwrap();
        assert_eq!(s.get(&[]), Some(70.0));
        // Output diagonal and broadcast in the general labelled form.
        let v = Tensor::new(vec![2], vec![1.0, 2.0]).unwrap();
        let e = reference_labels(&[(&v, &[0])], &[0, 0, 1], &[2, 3]).unwrap();
        assert_eq!(e.get(&[1, 1, 2]), Some(2.0));
        assert_eq!(e.get(&[0, 1, 2]), Some(0.0));
        assert!(reference_einsum("ij,jk->ik", &[&a, &v]).is_err());
    }
}

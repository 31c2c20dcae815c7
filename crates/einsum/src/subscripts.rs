//! Einsum subscripts: [`Subscripts::parse`] (`"ab,bc->ac"`, any Unicode letters, implicit
//! output, numpy's ellipsis `...`) and, given operand shapes, the numbered network
//! ([`Subscripts::resolve`]): every label and every ellipsis dimension gets a number and a
//! size, with numpy's broadcasting.
//!
//! Invariants of a parsed [`Subscripts`]: each operand and the output hold at most one
//! ellipsis; output labels are unique and occur in some operand. Of a [`LabelledNetwork`]: every label number is below `sizes.len()`,
//! every operand axis has the size of its label or size 1 (broadcast; a label of size 0 is empty
//! wherever it is 0 or 1), and the output's
//! labels are distinct.

use rustc_hash::FxHashMap;

use crate::error::{EinsumError, EinsumResult};

/// Parsed einsum subscripts: one label list per operand and the output labels, each with
/// the position of its ellipsis, if any.
///
/// A label is any character but `,`, `-`, `>`, `.`, ASCII whitespace and control characters:
/// letters, and also `é`, `Ç`, `×`, `0` or U+1680 (Ogham space mark), which opt_einsum's
/// generated symbols (`get_symbol`) use. ASCII whitespace is ignored; other Unicode
/// whitespace is a label, since `get_symbol` hands some out (opt_einsum itself strips only
/// the ASCII space). Without `->` the output is the ellipsis (if an operand has one)
/// followed by the labels that appear exactly once, sorted (the numpy convention). An
/// output label must appear in some operand and at most once.
///
/// `...` in an operand stands for the axes its labels do not name (leading, trailing or in
/// the middle, wherever it is written); the ellipses of all operands are aligned from the
/// right and broadcast against each other as numpy broadcasts shapes. An explicit output
/// may place `...` anywhere, or leave it out to sum those axes (numpy's `optimize=True`
/// path does the same; its plain loop refuses); an output `...` with no operand ellipsis
/// stands for no axes, as in numpy.
///
/// ```
/// use einsum::Subscripts;
/// let s = Subscripts::parse("ab,bc->ac").unwrap();
/// assert_eq!(s.inputs(), &[vec!['a', 'b'], vec!['b', 'c']]);
/// assert_eq!(s.output(), &['a', 'c']);
/// assert_eq!(Subscripts::parse("éa,aÇ").unwrap().output(), &['Ç', 'é']);
/// assert!(Subscripts::parse("ab,b>c->a").is_err());
/// // Ellipses: positions within the named labels.
/// let s = Subscripts::parse("...ij,j...").unwrap();
/// assert_eq!((s.ellipsis(0), s.ellipsis(1), s.output_ellipsis()), (Some(0), Some(1), Some(0)));
/// assert_eq!(s.to_string(), "...ij,j...->...i");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Subscripts {
    inputs: Vec<Vec<char>>,
    output: Vec<char>,
    /// Per operand, where its ellipsis sits among its labels.
    ellipses: Vec<Option<usize>>,
    /// Where the output's ellipsis sits among its labels.
    output_ellipsis: Option<usize>,
}

/// The fields of [`Subscripts`]: labels per operand, output labels, ellipsis positions.
pub(crate) type SubscriptsParts = (Vec<Vec<char>>, Vec<char>, Vec<Option<usize>>, Option<usize>);

/// Subscripts numbered for given shapes ([`Subscripts::resolve`]): labels are `0..sizes.len()`,
/// named labels and ellipsis dimensions in order of first appearance (operands, then output).
///
/// ```
/// use einsum::Subscripts;
/// let s = Subscripts::parse("...ij,...jk->...ik").unwrap();
/// let n = s.resolve(&[&[5, 2, 3], &[3, 4]]).unwrap();
/// // Operand 0's ellipsis is one axis (label 0, size 5); operand 1's is empty.
/// assert_eq!(n.inputs, vec![vec![0, 1, 2], vec![2, 3]]);
/// assert_eq!(n.output, vec![0, 1, 3]);
/// assert_eq!(n.sizes, vec![5, 2, 3, 4]);
/// assert_eq!(n.names, vec![None, Some('i'), Some('j'), Some('k')]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelledNetwork {
    /// The labels of every operand axis.
    pub inputs: Vec<Vec<u32>>,
    /// The output's labels (distinct).
    pub output: Vec<u32>,
    /// The size of every label after broadcasting; an operand axis has this size or 1.
    pub sizes: Vec<usize>,
    /// The character of every label: `None` for an ellipsis dimension and for the labels
    /// [`LabelledNetwork::squeeze_broadcast`] adds.
    pub names: Vec<Option<char>>,
}

impl LabelledNetwork {
    /// The same network with every broadcast axis (size 1 in the operand, larger in the
    /// network) given a label of its own, of size 1, that no other axis has: summed over a
    /// single entry, it is the broadcast. Every axis then has its label's size exactly,
    /// which is what the contraction primitives require.
    ///
    /// ```
    /// use einsum::Subscripts;
    /// let s = Subscripts::parse("ij,ij->ij").unwrap();
    /// let n = s.resolve(&[&[1, 3], &[2, 3]]).unwrap().squeeze_broadcast(&[&[1, 3], &[2, 3]]);
    /// assert_eq!(n.inputs, vec![vec![2, 1], vec![0, 1]]);
    /// assert_eq!(n.sizes, vec![2, 3, 1]);
    /// ```
    pub fn squeeze_broadcast(mut self, shapes: &[&[usize]]) -> LabelledNetwork {
        for (labels, shape) in self.inputs.iter_mut().zip(shapes) {
            for (c, &d) in labels.iter_mut().zip(shape.iter()) {
                if self.sizes[*c as usize] != d {
                    self.sizes.push(1);
                    self.names.push(None);
                    *c = self.sizes.len() as u32 - 1;
                }
            }
        }
        self
    }
}

impl Subscripts {
    /// Parses `"in1,in2,...->out"` or `"in1,in2,..."`.
    pub fn parse(expression: &str) -> EinsumResult<Self> {
        let err = |position: usize, message: String| EinsumError::Parse {
            expression: expression.to_string(),
            position,
            message,
        };
        let mut inputs: Vec<Vec<char>> = vec![Vec::new()];
        let mut ellipses: Vec<Option<usize>> = vec![None];
        let mut output: Option<Vec<char>> = None;
        let mut output_ellipsis: Option<usize> = None;
        let mut chars = expression.chars().enumerate().peekable();
        while let Some((i, c)) = chars.next() {
            match c {
                // ASCII only: Unicode spaces such as U+1680 are labels (see the type's docs).
                c if c.is_ascii_whitespace() => {}
                ',' if output.is_none() => {
                    inputs.push(Vec::new());
                    ellipses.push(None);
                }
                ',' => return Err(err(i, "`,` after `->`: the output is a single label list".into())),
                '-' => {
                    if chars.next().map(|(_, c)| c) != Some('>') {
                        return Err(err(i, "`-` must be followed by `>`".into()));
                    }
                    if output.is_some() {
                        return Err(err(i, "more than one `->`".into()));
                    }
                    output = Some(Vec::new());
                }
                '.' => {
                    if chars.next_if(|&(_, c)| c == '.').is_none() || chars.next_if(|&(_, c)| c == '.').is_none() {
                        return Err(err(i, "a `.` that is not part of an ellipsis `...`".into()));
                    }
                    let (slot, len, what) = match &output {
                        Some(out) => (&mut output_ellipsis, out.len(), "the output".to_string()),
                        None => {
                            let k = inputs.len() - 1;
                            (&mut ellipses[k], inputs[k].len(), format!("operand {k}"))
                        }
                    };
                    if slot.is_some() {
                        return Err(err(i, format!("{what} has two ellipses (`...`); one may stand for many axes")));
                    }
                    *slot = Some(len);
                }
                c if is_label(c) => match &mut output {
                    Some(out) => {
                        if out.contains(&c) {
                            return Err(err(i, format!("output label `{c}` appears twice")));
                        }
                        out.push(c);
                    }
                    None => inputs.last_mut().expect("at least one operand list").push(c),
                },
                c => {
                    return Err(err(
                        i,
                        format!(
                            "`{c}` is not a label (labels are characters other than `,`, `-`, `>`, `.`, ASCII whitespace and controls)"
                        ),
                    ));
                }
            }
        }
        let any_ellipsis = ellipses.iter().any(Option::is_some);
        let output = match output {
            Some(out) => {
                for (pos, &c) in out.iter().enumerate() {
                    if !inputs.iter().any(|l| l.contains(&c)) {
                        return Err(err(
                            expression.chars().count() - out.len() + pos,
                            format!("output label `{c}` appears in no operand"),
                        ));
                    }
                }
                out
            }
            None => {
                let mut counts: FxHashMap<char, usize> = FxHashMap::default();
                for &c in inputs.iter().flatten() {
                    *counts.entry(c).or_default() += 1;
                }
                let mut out: Vec<char> = counts.into_iter().filter(|&(_, n)| n == 1).map(|(c, _)| c).collect();
                out.sort_unstable();
                output_ellipsis = any_ellipsis.then_some(0);
                out
            }
        };
        Ok(Subscripts { inputs, output, ellipses, output_ellipsis })
    }

    /// Subscripts from label lists (no syntax to parse, no ellipsis). The output must be
    /// unique labels that occur in the inputs.
    pub fn from_labels(inputs: Vec<Vec<char>>, output: Vec<char>) -> EinsumResult<Self> {
        let n = inputs.len();
        let text = Subscripts { inputs, output, ellipses: vec![None; n], output_ellipsis: None }.to_string();
        Subscripts::parse(&text).map_err(|_| EinsumError::Parse {
            expression: text,
            position: 0,
            message:
                "labels must not be syntax, whitespace or controls; output labels unique and present in an operand"
                    .into(),
        })
    }

    /// The fields, for [`crate::Plan`]'s serialized form.
    pub(crate) fn parts(&self) -> SubscriptsParts {
        (self.inputs.clone(), self.output.clone(), self.ellipses.clone(), self.output_ellipsis)
    }

    /// Subscripts from [`Subscripts::parts`], checked: one ellipsis entry per operand,
    /// each within its labels, and labels that the parser would accept.
    pub(crate) fn from_parts(parts: SubscriptsParts) -> EinsumResult<Self> {
        let (inputs, output, ellipses, output_ellipsis) = parts;
        let bad = |why: &str| EinsumError::Parse { expression: String::new(), position: 0, message: why.to_string() };
        if ellipses.len() != inputs.len() {
            return Err(bad("one ellipsis entry per operand"));
        }
        let fits = |labels: &[char], e: Option<usize>| e.is_none_or(|p| p <= labels.len());
        if !inputs.iter().zip(&ellipses).all(|(l, &e)| fits(l, e)) || !fits(&output, output_ellipsis) {
            return Err(bad("an ellipsis past its labels"));
        }
        if !inputs.iter().flatten().chain(&output).all(|&c| is_label(c)) {
            return Err(bad("labels must not be syntax, whitespace or controls"));
        }
        Ok(Subscripts { inputs, output, ellipses, output_ellipsis })
    }

    /// The same subscripts with the named labels `drop` removed everywhere (what a slice
    /// of the contraction computes, [`crate::Plan::slice`]); ellipses stay where they were
    /// among the labels left.
    pub(crate) fn without(&self, drop: &[char]) -> Subscripts {
        let cut = |labels: &[char], ellipsis: Option<usize>| {
            let at = ellipsis.map(|p| labels[..p].iter().filter(|c| !drop.contains(c)).count());
            (labels.iter().copied().filter(|c| !drop.contains(c)).collect::<Vec<char>>(), at)
        };
        let (inputs, ellipses) = self.inputs.iter().zip(&self.ellipses).map(|(l, &e)| cut(l, e)).unzip();
        let (output, output_ellipsis) = cut(&self.output, self.output_ellipsis);
        Subscripts { inputs, output, ellipses, output_ellipsis }
    }

    /// One list of named labels per operand (an ellipsis is not in it: see
    /// [`Subscripts::ellipsis`]).
    pub fn inputs(&self) -> &[Vec<char>] {
        &self.inputs
    }

    /// The output's named labels.
    pub fn output(&self) -> &[char] {
        &self.output
    }

    /// Where operand `i`'s ellipsis sits among its labels (`Some(0)`: before the first),
    /// or `None` without one (or past the last operand).
    pub fn ellipsis(&self, i: usize) -> Option<usize> {
        self.ellipses.get(i).copied().flatten()
    }

    /// Where the output's ellipsis sits among its labels.
    pub fn output_ellipsis(&self) -> Option<usize> {
        self.output_ellipsis
    }

    /// Whether any operand has an ellipsis.
    pub fn has_ellipsis(&self) -> bool {
        self.ellipses.iter().any(Option::is_some)
    }

    /// The size of every named label, checking operand count, ranks and that a label has
    /// one size (or size 1, broadcast: a label takes the size of its axes that are not 1).
    pub fn label_sizes(&self, shapes: &[&[usize]]) -> EinsumResult<FxHashMap<char, usize>> {
        let n = self.resolve(shapes)?;
        let mut out = FxHashMap::default();
        for (labels, numbers) in self.inputs.iter().zip(self.named_numbers(&n, shapes)) {
            for (&c, k) in labels.iter().zip(numbers) {
                out.insert(c, n.sizes[k as usize]);
            }
        }
        Ok(out)
    }

    /// The numbers [`Subscripts::resolve`] gave each operand's named labels.
    fn named_numbers<'a>(
        &'a self,
        n: &'a LabelledNetwork,
        shapes: &'a [&[usize]],
    ) -> impl Iterator<Item = Vec<u32>> + 'a {
        self.inputs.iter().enumerate().map(move |(i, labels)| {
            let (e, extra) = (self.ellipses[i], shapes[i].len() - labels.len());
            let numbers = &n.inputs[i];
            match e {
                None => numbers.clone(),
                Some(p) => numbers[..p].iter().chain(&numbers[p + extra..]).copied().collect(),
            }
        })
    }

    /// Numbers the labels for operands of `shapes` and broadcasts: a label's size is that
    /// of its axes that are not 1, which must agree; the ellipses stand for the
    /// axes their operand's labels do not name, aligned from the right and broadcast the
    /// same way (numpy's rule). Axes sharing a label within one operand (a diagonal) must
    /// have one size.
    pub fn resolve(&self, shapes: &[&[usize]]) -> EinsumResult<LabelledNetwork> {
        if shapes.len() != self.inputs.len() {
            return Err(EinsumError::Shape(format!(
                "`{self}` has {} operands but {} shapes were given",
                self.inputs.len(),
                shapes.len()
            )));
        }
        // Ranks, and the ellipsis rank of every operand.
        let mut ranks = Vec::with_capacity(shapes.len());
        for (i, (labels, shape)) in self.inputs.iter().zip(shapes).enumerate() {
            let l: String = labels.iter().collect();
            match self.ellipses[i] {
                None if labels.len() != shape.len() => {
                    return Err(EinsumError::Shape(format!(
                        "operand {i} has subscripts `{l}` (rank {}) but shape {shape:?} (rank {})",
                        labels.len(),
                        shape.len()
                    )));
                }
                Some(_) if labels.len() > shape.len() => {
                    return Err(EinsumError::Shape(format!(
                        "operand {i} has subscripts with {} named labels besides its ellipsis but shape {shape:?} \
                         (rank {})",
                        labels.len(),
                        shape.len()
                    )));
                }
                _ => ranks.push(shape.len() - labels.len()),
            }
        }
        let ell_rank = ranks.iter().copied().max().unwrap_or(0);
        // Label numbers: named labels and ellipsis dimensions (`Err(d)`: dimension d of the
        // broadcast ellipsis, counted from its left), in order of first appearance.
        let mut numbers: FxHashMap<Result<char, usize>, u32> = FxHashMap::default();
        let mut sizes: Vec<usize> = Vec::new();
        let mut names: Vec<Option<char>> = Vec::new();
        // Where each label's size came from (operand, axis), for messages.
        let mut origin: Vec<(usize, usize)> = Vec::new();
        let mut inputs: Vec<Vec<u32>> = Vec::with_capacity(shapes.len());
        for (i, (labels, shape)) in self.inputs.iter().zip(shapes).enumerate() {
            let mut list = Vec::with_capacity(shape.len());
            let keys: Vec<Result<char, usize>> = match self.ellipses[i] {
                None => labels.iter().map(|&c| Ok(c)).collect(),
                Some(p) => {
                    let ell = (ell_rank - ranks[i]..ell_rank).map(Err);
                    labels[..p].iter().map(|&c| Ok(c)).chain(ell).chain(labels[p..].iter().map(|&c| Ok(c))).collect()
                }
            };
            for (axis, (key, &d)) in keys.iter().zip(shape.iter()).enumerate() {
                let what = || match key {
                    Ok(c) => format!("label `{c}`"),
                    Err(e) => format!("ellipsis dimension {e} (of {ell_rank}, aligned from the right)"),
                };
                // Within one operand a repeated label is a diagonal: no broadcasting.
                let prev = keys[..axis].iter().position(|k| k == key);
                if let Some(prev) = prev.filter(|&p| shape[p] != d) {
                    return Err(EinsumError::Shape(format!(
                        "{} is repeated in operand {i} (shape {shape:?}) on axes {prev} and {axis} of sizes {} and {d}: \
                         a repeated label takes a diagonal, so its axes must have one size",
                        what(),
                        shape[prev]
                    )));
                }
                let k = *numbers.entry(*key).or_insert_with(|| {
                    sizes.push(d);
                    names.push(key.ok());
                    origin.push((i, axis));
                    sizes.len() as u32 - 1
                });
                let size = &mut sizes[k as usize];
                if *size != d {
                    let (oi, oa) = origin[k as usize];
                    if *size != 1 && d != 1 {
                        return Err(EinsumError::Shape(format!(
                            "{} has size {} in operand {oi} (axis {oa}, shape {:?}) and {d} in operand {i} \
                             (axis {axis}, shape {shape:?}): sizes must agree or be 1",
                            what(),
                            *size,
                            shapes[oi]
                        )));
                    }
                    if *size == 1 {
                        // Broadcast: 1 stretches to d (also to 0).
                        *size = d;
                        origin[k as usize] = (i, axis);
                    }
                }
                list.push(k);
            }
            inputs.push(list);
        }
        let out_keys: Vec<Result<char, usize>> = match self.output_ellipsis {
            None => self.output.iter().map(|&c| Ok(c)).collect(),
            Some(p) => {
                let o = &self.output;
                o[..p]
                    .iter()
                    .map(|&c| Ok(c))
                    .chain((0..ell_rank).map(Err))
                    .chain(o[p..].iter().map(|&c| Ok(c)))
                    .collect()
            }
        };
        let output = out_keys.iter().map(|k| numbers[k]).collect();
        Ok(LabelledNetwork { inputs, output, sizes, names })
    }
}

/// Whether `c` can be a label.
fn is_label(c: char) -> bool {
    !c.is_ascii_whitespace() && !c.is_control() && !matches!(c, ',' | '-' | '>' | '.')
}

/// Writes `labels` with `...` at `ellipsis`.
fn write_labels(f: &mut std::fmt::Formatter<'_>, labels: &[char], ellipsis: Option<usize>) -> std::fmt::Result {
    for (k, c) in labels.iter().enumerate() {
        if ellipsis == Some(k) {
            f.write_str("...")?;
        }
        write!(f, "{c}")?;
    }
    if ellipsis == Some(labels.len()) {
        f.write_str("...")?;
    }
    Ok(())
}

impl std::fmt::Display for Subscripts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, l) in self.inputs.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write_labels(f, l, self.ellipses[i])?;
        }
        f.write_str("->")?;
        write_labels(f, &self.output, self.output_ellipsis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_err(e: &str) -> String {
        Subscripts::parse(e).unwrap_err().to_string()
    }

    #[test]
    fn explicit_implicit_and_scalar_forms() {
        let s = Subscripts::parse(" ba , cb -> ca ").unwrap();
        assert_eq!(s.to_string(), "ba,cb->ca");
        assert_eq!(Subscripts::parse("ba,cb").unwrap().output(), &['a', 'c']);
        assert_eq!(Subscripts::parse("ii").unwrap().output(), &[] as &[char]);
        assert_eq!(Subscripts::parse("ab,ab->").unwrap().output(), &[] as &[char]);
        assert_eq!(Subscripts::parse(",a->a").unwrap().inputs(), &[vec![], vec!['a']]);
        assert_eq!(Subscripts::parse("ÁÂ,ÂÃ->ÁÃ").unwrap().inputs()[1], vec!['Â', 'Ã']);
    }

    #[test]
    fn errors_name_the_problem() {
        assert!(parse_err("ab,b>->a").contains("`>` is not a label"));
        assert!(parse_err("a\u{7}").contains("is not a label"));
        assert!(parse_err("ab->aa").contains("output label `a` appears twice"));
        assert!(parse_err("ab->c").contains("output label `c` appears in no operand"));
        assert!(parse_err("ab->a->b").contains("more than one `->`"));
        assert!(parse_err("a-b").contains("`-` must be followed by `>`"));
        assert!(parse_err("...a...,a").contains("operand 0 has two ellipses"));
        assert!(parse_err("...a,a->......").contains("the output has two ellipses"));
        assert!(parse_err("a..b").contains("not part of an ellipsis"));
        // numpy accepts an output ellipsis without operand ones: it stands for no axes.
        assert_eq!(Subscripts::parse("a,b->...ab").unwrap().output_ellipsis(), Some(0));
        assert!(parse_err("a->a,b").contains("`,` after `->`"));
    }

    #[test]
    fn label_sizes_are_checked() {
        let s = Subscripts::parse("ab,bc->ac").unwrap();
        let sizes = s.label_sizes(&[&[2, 3], &[3, 4]]).unwrap();
        assert_eq!((sizes[&'a'], sizes[&'b'], sizes[&'c']), (2, 3, 4));
        let e = s.label_sizes(&[&[2, 3], &[5, 4]]).unwrap_err().to_string();
        assert!(e.contains("label `b` has size 3 in operand 0 (axis 1, shape [2, 3]) and 5 in operand 1"), "{e}");
        assert!(s.label_sizes(&[&[2, 3]]).unwrap_err().to_string().contains("2 operands but 1 shapes"));
        assert!(s.label_sizes(&[&[2, 3], &[3]]).unwrap_err().to_string().contains("rank 2"));
    }

    #[test]
    fn ellipses_parse_print_and_resolve() {
        let s = Subscripts::parse("a...b, ...->...").unwrap();
        assert_eq!((s.ellipsis(0), s.ellipsis(1), s.output_ellipsis()), (Some(1), Some(0), Some(0)));
        assert_eq!(s.to_string(), "a...b,...->...");
        assert_eq!(Subscripts::parse(&s.to_string()).unwrap(), s);
        // Implicit output: the ellipsis first, then the single labels.
        assert_eq!(Subscripts::parse("b...a,a...").unwrap().to_string(), "b...a,a...->...b");
        // The output may leave the ellipsis out (summed) or put it anywhere.
        let n = Subscripts::parse("i...j->j...i").unwrap().resolve(&[&[2, 3, 4, 5]]).unwrap();
        assert_eq!((n.inputs, n.output), (vec![vec![0, 1, 2, 3]], vec![3, 1, 2, 0]));
        let n = Subscripts::parse("...j->j").unwrap().resolve(&[&[2, 3]]).unwrap();
        assert_eq!(n.output, vec![1]);
        // Broadcasting: ellipses aligned from the right, sizes 1 stretched.
        let s = Subscripts::parse("...i,...i->...i").unwrap();
        let n = s.resolve(&[&[4, 1, 3], &[5, 3]]).unwrap();
        assert_eq!(n.sizes, vec![4, 5, 3]);
        assert_eq!(n.inputs, vec![vec![0, 1, 2], vec![1, 2]]);
        assert_eq!(n.output, vec![0, 1, 2]);
        let sizes = s.label_sizes(&[&[4, 1, 3], &[5, 1]]).unwrap();
        assert_eq!(sizes[&'i'], 3);
    }

    #[test]
    fn broadcasting_errors_name_the_axes() {
        let err = |e: &str, shapes: &[&[usize]]| Subscripts::parse(e).unwrap().resolve(shapes).unwrap_err().to_string();
        let e = err("...i,...i", &[&[2, 3], &[4, 3]]);
        assert!(e.contains("ellipsis dimension 0 (of 1, aligned from the right) has size 2 in operand 0"), "{e}");
        assert!(e.contains("sizes must agree or be 1"), "{e}");
        let e = err("ij,jk", &[&[2, 3], &[4, 5]]);
        assert!(e.contains("label `j` has size 3 in operand 0 (axis 1, shape [2, 3]) and 4 in operand 1"), "{e}");
        let e = err("ii", &[&[1, 3]]);
        assert!(e.contains("label `i` is repeated in operand 0 (shape [1, 3]) on axes 0 and 1"), "{e}");
        let e = err("ab...c", &[&[2, 3]]);
        assert!(e.contains("3 named labels besides its ellipsis but shape [2, 3]"), "{e}");
    }
    /// opt_einsum's `get_symbol(i)`, written from its documented formula: the 52 ASCII
    /// letters, then `i + 140` below 55296 and `i + 2048` from there (`None` where that is
    /// a surrogate, which no `str` can hold).
    fn get_symbol(i: u32) -> Option<char> {
        const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
        match i {
            0..52 => Some(LETTERS[i as usize] as char),
            52..55296 => char::from_u32(i + 140),
            _ => char::from_u32(i + 2048),
        }
    }

    #[test]
    fn unicode_spaces_that_get_symbol_hands_out_are_labels() {
        // U+1680 (get_symbol(5620)) and U+3000 are whitespace to Unicode.
        for (i, c) in [(5620, '\u{1680}'), (12148, '\u{3000}')] {
            assert_eq!(get_symbol(i), Some(c));
            let s = Subscripts::parse(&format!("a{c},{c}b->ab")).unwrap();
            assert_eq!(s.inputs(), &[vec!['a', c], vec![c, 'b']]);
        }
        // ASCII whitespace is still skipped.
        assert_eq!(Subscripts::parse("a b,\tb\n->a").unwrap().to_string(), "ab,b->a");
    }

    proptest::proptest! {
        /// Every symbol `get_symbol` gives below 200000 parses as a label, wherever it sits.
        #[test]
        fn every_get_symbol_is_a_label(i in 0u32..200_000, j in 0u32..200_000) {
            let (Some(x), Some(y)) = (get_symbol(i), get_symbol(j)) else { return Ok(()) };
            proptest::prop_assume!(x != y);
            let s = Subscripts::parse(&format!("{x}{y},{y}->{x}")).unwrap();
            proptest::prop_assert_eq!(s.inputs(), &[vec![x, y], vec![y]]);
            proptest::prop_assert_eq!(s.output(), &[x]);
            let n = s.resolve(&[&[2, 3], &[3]]).unwrap();
            proptest::prop_assert_eq!(n.sizes, vec![2, 3]);
        }
    }
}

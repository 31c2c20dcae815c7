//! Einsum subscripts: [`Subscripts::parse`] (`"ab,bc->ac"`, any Unicode letters, implicit
//! output) and the size of every label given operand shapes.

use rustc_hash::FxHashMap;

use crate::error::{EinsumError, EinsumResult};

/// Parsed einsum subscripts: one label list per operand and the output labels.
///
/// A label is any character but `,`, `-`, `>`, `.`, whitespace and control characters:
/// letters, and also `é`, `Ç`, `×` or `0`, which opt_einsum's generated symbols use.
/// Whitespace is ignored. Without `->` the output is the labels that appear exactly once, sorted (the
/// numpy convention). An output label must appear in some operand and at most once.
/// Ellipses (`...`) are not supported.
///
/// ```
/// use einsum::Subscripts;
/// let s = Subscripts::parse("ab,bc->ac").unwrap();
/// assert_eq!(s.inputs(), &[vec!['a', 'b'], vec!['b', 'c']]);
/// assert_eq!(s.output(), &['a', 'c']);
/// assert_eq!(Subscripts::parse("éa,aÇ").unwrap().output(), &['Ç', 'é']);
/// assert!(Subscripts::parse("ab,b>c->a").is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Subscripts {
    inputs: Vec<Vec<char>>,
    output: Vec<char>,
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
        let mut output: Option<Vec<char>> = None;
        let mut chars = expression.chars().enumerate().peekable();
        while let Some((i, c)) = chars.next() {
            match c {
                c if c.is_whitespace() => {}
                ',' if output.is_none() => inputs.push(Vec::new()),
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
                '.' => return Err(err(i, "ellipses (`...`) are not supported".into())),
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
                            "`{c}` is not a label (labels are characters other than `,`, `-`, `>`, `.`, whitespace and controls)"
                        ),
                    ));
                }
            }
        }
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
                out
            }
        };
        Ok(Subscripts { inputs, output })
    }

    /// Subscripts from label lists (no syntax to parse). The output must be unique labels
    /// that occur in the inputs.
    pub fn from_labels(inputs: Vec<Vec<char>>, output: Vec<char>) -> EinsumResult<Self> {
        let text = Subscripts { inputs: inputs.clone(), output: output.clone() }.to_string();
        Subscripts::parse(&text).map_err(|_| EinsumError::Parse {
            expression: text,
            position: 0,
            message:
                "labels must not be syntax, whitespace or controls; output labels unique and present in an operand"
                    .into(),
        })
    }

    /// One label list per operand.
    pub fn inputs(&self) -> &[Vec<char>] {
        &self.inputs
    }

    /// The output labels.
    pub fn output(&self) -> &[char] {
        &self.output
    }

    /// The size of every label, checking operand count, ranks and that a label has one size.
    pub fn label_sizes(&self, shapes: &[&[usize]]) -> EinsumResult<FxHashMap<char, usize>> {
        if shapes.len() != self.inputs.len() {
            return Err(EinsumError::Shape(format!(
                "`{self}` has {} operands but {} shapes were given",
                self.inputs.len(),
                shapes.len()
            )));
        }
        let mut sizes: FxHashMap<char, usize> = FxHashMap::default();
        for (i, (labels, shape)) in self.inputs.iter().zip(shapes).enumerate() {
            if labels.len() != shape.len() {
                let l: String = labels.iter().collect();
                return Err(EinsumError::Shape(format!(
                    "operand {i} has subscripts `{l}` (rank {}) but shape {shape:?} (rank {})",
                    labels.len(),
                    shape.len()
                )));
            }
            for (&c, &d) in labels.iter().zip(shape.iter()) {
                match sizes.insert(c, d) {
                    Some(prev) if prev != d => {
                        return Err(EinsumError::Shape(format!(
                            "label `{c}` has size {prev} in one place and {d} in operand {i} (shape {shape:?})"
                        )));
                    }
                    _ => {}
                }
            }
        }
        Ok(sizes)
    }
}

/// Whether `c` can be a label.
fn is_label(c: char) -> bool {
    !c.is_whitespace() && !c.is_control() && !matches!(c, ',' | '-' | '>' | '.')
}

impl std::fmt::Display for Subscripts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, l) in self.inputs.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            for c in l {
                write!(f, "{c}")?;
            }
        }
        f.write_str("->")?;
        for c in &self.output {
            write!(f, "{c}")?;
        }
        Ok(())
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
        assert!(parse_err("...a,a").contains("ellipses"));
        assert!(parse_err("a->a,b").contains("`,` after `->`"));
    }

    #[test]
    fn label_sizes_are_checked() {
        let s = Subscripts::parse("ab,bc->ac").unwrap();
        let sizes = s.label_sizes(&[&[2, 3], &[3, 4]]).unwrap();
        assert_eq!((sizes[&'a'], sizes[&'b'], sizes[&'c']), (2, 3, 4));
        let e = s.label_sizes(&[&[2, 3], &[5, 4]]).unwrap_err().to_string();
        assert!(e.contains("label `b` has size 3 in one place and 5 in operand 1"), "{e}");
        assert!(s.label_sizes(&[&[2, 3]]).unwrap_err().to_string().contains("2 operands but 1 shapes"));
        assert!(s.label_sizes(&[&[2, 3], &[3]]).unwrap_err().to_string().contains("rank 2"));
    }
}

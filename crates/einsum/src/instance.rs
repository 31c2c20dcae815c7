//! Benchmark instances (the Einsum Benchmark's JSON form): [`Instance::from_json`] with
//! clear errors for malformed input, seeded random operands scaled so the result stays
//! finite ([`Instance::random_operands`]), and the instances bundled with the crate's
//! sources ([`BUNDLED_DIR`]).
//!
//! The bundled instances are listed once, by the directory itself: every `*.json` file of
//! [`BUNDLED_DIR`] is one, [`Instance::bundled_names`] lists them (sorted by name) for
//! the tests, examples and benches, and the Python scripts glob the same directory.

use crate::rng::Rng;
use serde_json::Value;

use crate::elem::Elem;
use crate::error::{EinsumError, EinsumResult};
use crate::network::Einsum;
use crate::path::{ContractionPath, PathChoice};
use crate::subscripts::Subscripts;
use crate::tensor::{Tensor, checked_len};

/// The directory of the Einsum Benchmark instances that come with this crate's sources
/// (`crates/einsum/tests/data/`): its `*.json` files are the bundled instances. It names
/// the source tree the crate was built from.
pub const BUNDLED_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");

/// The element type an instance asks for (`"dtype"`): the two the crate runs.
///
/// ```
/// use einsum::{Dtype, Instance};
/// let json = r#"{"format_string": "ij->", "shapes": [[2, 2]], "dtype": "complex128"}"#;
/// assert_eq!(Instance::from_json(json).unwrap().dtype, Dtype::Complex128);
/// let e = Instance::from_json(&json.replace("complex128", "float32")).unwrap_err();
/// assert!(e.to_string().contains("dtype `float32` is not supported"), "{e}");
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Dtype {
    /// `float64` (and the default when an instance names none): [`f64`].
    #[default]
    Float64,
    /// `complex128`: [`crate::c64`].
    Complex128,
}

impl Dtype {
    /// numpy's name: `"float64"` or `"complex128"`.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Float64 => "float64",
            Dtype::Complex128 => "complex128",
        }
    }

    /// The dtype of numpy's name, or `None` for any other.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "float64" | "f8" | "double" => Some(Dtype::Float64),
            "complex128" | "c16" | "cdouble" => Some(Dtype::Complex128),
            _ => None,
        }
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// An instance: expression, shapes, dtype and the two opt_einsum paths, already checked
/// against each other (labels and sizes agree, the paths are valid).
///
/// ```
/// use einsum::Instance;
/// let json = r#"{"name": "mm", "format_string": "ij,jk->ik", "shapes": [[2, 3], [3, 4]],
///                "paths": {"opt_flops": {"path": [[0, 1]]}, "opt_size": {"path": [[0, 1]]}}}"#;
/// let inst = Instance::from_json(json).unwrap();
/// assert_eq!(inst.shapes, vec![vec![2, 3], vec![3, 4]]);
/// let bad = json.replace("[3, 4]", "[5, 4]");
/// assert!(Instance::from_json(&bad).unwrap_err().to_string().contains("label `j`"));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    /// The instance's name (`"unnamed"` if absent).
    pub name: String,
    /// The einsum expression.
    pub format_string: String,
    /// One shape per operand.
    pub shapes: Vec<Vec<usize>>,
    /// `paths.opt_flops.path`, if present.
    pub opt_flops: Option<ContractionPath>,
    /// `paths.opt_size.path`, if present.
    pub opt_size: Option<ContractionPath>,
    /// `dtype` (`float64` if absent; any dtype but `float64` and `complex128` is an error).
    pub dtype: Dtype,
}

fn bad(message: impl Into<String>) -> EinsumError {
    EinsumError::Instance(message.into())
}

fn as_usize(v: &Value, what: &dyn Fn() -> String) -> EinsumResult<usize> {
    v.as_u64()
        .and_then(|x| usize::try_from(x).ok())
        .ok_or_else(|| bad(format!("{} must be a non-negative integer, found {v}", what())))
}

fn path_of(paths: &Value, name: &str) -> EinsumResult<Option<ContractionPath>> {
    let Some(p) = paths.get(name) else { return Ok(None) };
    let steps = p
        .get("path")
        .and_then(Value::as_array)
        .ok_or_else(|| bad(format!("`paths.{name}.path` must be an array of steps")))?;
    let mut out = Vec::with_capacity(steps.len());
    for (s, step) in steps.iter().enumerate() {
        let what = || format!("`paths.{name}.path[{s}]`");
        match step.as_array() {
            Some(positions) if !positions.is_empty() => {
                out.push(positions.iter().map(|p| as_usize(p, &what)).collect::<EinsumResult<Vec<usize>>>()?)
            }
            _ => return Err(bad(format!("{} must be a list of positions, found {step}", what()))),
        }
    }
    Ok(Some(ContractionPath::from_steps(out)))
}

impl Instance {
    /// Parses and checks an instance.
    pub fn from_json(text: &str) -> EinsumResult<Self> {
        let v: Value = serde_json::from_str(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        if !v.is_object() {
            return Err(bad("the top level must be an object"));
        }
        let name = v.get("name").and_then(Value::as_str).unwrap_or("unnamed").to_string();
        let format_string = v
            .get("format_string")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("`{name}`: `format_string` must be a string")))?
            .to_string();
        let shapes_v = v
            .get("shapes")
            .and_then(Value::as_array)
            .ok_or_else(|| bad(format!("`{name}`: `shapes` must be an array of shapes")))?;
        let mut shapes = Vec::with_capacity(shapes_v.len());
        for (i, s) in shapes_v.iter().enumerate() {
            let dims =
                s.as_array().ok_or_else(|| bad(format!("`{name}`: `shapes[{i}]` must be an array, found {s}")))?;
            let what = || format!("`{name}`: `shapes[{i}]` entries");
            let shape = dims.iter().map(|d| as_usize(d, &what)).collect::<EinsumResult<Vec<usize>>>()?;
            if checked_len(&shape).is_none() {
                return Err(bad(format!("`{name}`: shape {i} {shape:?} overflows")));
            }
            shapes.push(shape);
        }
        if let Some(n) = v.get("num_tensors").and_then(Value::as_u64) {
            if n as usize != shapes.len() {
                return Err(bad(format!("`{name}`: `num_tensors` is {n} but {} shapes are given", shapes.len())));
            }
        }
        let (opt_flops, opt_size) = match v.get("paths") {
            None => (None, None),
            Some(p) if p.is_object() => (path_of(p, "opt_flops")?, path_of(p, "opt_size")?),
            Some(p) => return Err(bad(format!("`{name}`: `paths` must be an object, found {p}"))),
        };
        let dtype = match v.get("dtype") {
            None | Some(Value::Null) => Dtype::Float64,
            Some(Value::String(d)) => Dtype::from_name(d).ok_or_else(|| {
                bad(format!("`{name}`: dtype `{d}` is not supported (einsum runs float64 and complex128)"))
            })?,
            Some(d) => return Err(bad(format!("`{name}`: `dtype` must be a string, found {d}"))),
        };
        let inst = Instance { name, format_string, shapes, opt_flops, opt_size, dtype };
        inst.check()?;
        Ok(inst)
    }

    /// The names of the bundled instances: the `*.json` files of [`BUNDLED_DIR`] without
    /// their extension, sorted.
    ///
    /// ```
    /// let names = einsum::Instance::bundled_names().unwrap();
    /// assert!(names.iter().any(|n| n == "bin_matmul_256"));
    /// let inst = einsum::Instance::bundled(&names[0]).unwrap();
    /// assert_eq!(inst.name, names[0]);
    /// ```
    pub fn bundled_names() -> EinsumResult<Vec<String>> {
        let unreadable = |e: std::io::Error| bad(format!("cannot read {BUNDLED_DIR}: {e}"));
        let mut names = Vec::new();
        for entry in std::fs::read_dir(BUNDLED_DIR).map_err(unreadable)? {
            let path = entry.map_err(unreadable)?.path();
            if path.extension().is_some_and(|e| e == "json") {
                if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
                    names.push(stem.to_string());
                }
            }
        }
        names.sort();
        Ok(names)
    }

    /// The file of the bundled instance `name` (in [`BUNDLED_DIR`]).
    pub fn bundled_file(name: &str) -> std::path::PathBuf {
        std::path::Path::new(BUNDLED_DIR).join(format!("{name}.json"))
    }

    /// Reads the bundled instance `name` ([`Instance::bundled_file`]).
    pub fn bundled(name: &str) -> EinsumResult<Self> {
        Self::from_file(Self::bundled_file(name))
    }

    /// Reads and parses a file.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> EinsumResult<Self> {
        let p = path.as_ref();
        let text = std::fs::read_to_string(p).map_err(|e| bad(format!("cannot read {}: {e}", p.display())))?;
        Self::from_json(&text).map_err(|e| match e {
            EinsumError::Instance(m) => bad(format!("{}: {m}", p.display())),
            e => e,
        })
    }

    fn check(&self) -> EinsumResult<()> {
        let s = self.subscripts()?;
        let shapes: Vec<&[usize]> = self.shapes.iter().map(Vec::as_slice).collect();
        s.label_sizes(&shapes)?;
        for (name, p) in [("opt_flops", &self.opt_flops), ("opt_size", &self.opt_size)] {
            if let Some(p) = p {
                p.validate(self.shapes.len()).map_err(|e| bad(format!("`{}`: path `{name}`: {e}", self.name)))?;
            }
        }
        Ok(())
    }

    /// The parsed expression.
    pub fn subscripts(&self) -> EinsumResult<Subscripts> {
        Subscripts::parse(&self.format_string)
    }

    /// Builds the compiled network with `path` (`PathChoice::Greedy` or one of the paths).
    pub fn einsum<T: Elem>(&self, path: PathChoice) -> EinsumResult<Einsum<T>> {
        Einsum::new(&self.format_string, &self.shapes, path)
    }

    /// Seeded random operands scaled so the result stays of order one: entries are
    /// `u·Π_l size(l)^(-1/k_l)` with `u` uniform in `[0.5, 1.5)` (complex: both parts), over
    /// the summed labels `l` of the operand, `k_l` being the number of operands holding `l`.
    /// Every summed label then contributes a factor of about one, so results neither
    /// overflow nor underflow however many steps the network has.
    pub fn random_operands<T: Elem>(&self, seed: u64) -> EinsumResult<Vec<Tensor<T>>> {
        let s = self.subscripts()?;
        let mut holders: rustc_hash::FxHashMap<char, usize> = Default::default();
        for l in s.inputs() {
            let mut seen: Vec<char> = l.clone();
            seen.sort_unstable();
            seen.dedup();
            for c in seen {
                *holders.entry(c).or_default() += 1;
            }
        }
        let mut rng = Rng::new(seed);
        s.inputs()
            .iter()
            .zip(&self.shapes)
            .map(|(labels, shape)| {
                let mut scale = 1.0f64;
                let mut seen: Vec<char> = Vec::new();
                for (&c, &d) in labels.iter().zip(shape) {
                    if !s.output().contains(&c) && !seen.contains(&c) {
                        seen.push(c);
                        scale *= (d.max(1) as f64).powf(-1.0 / holders[&c] as f64);
                    }
                }
                Tensor::from_fn(shape.clone(), |_| {
                    let re = scale * (0.5 + rng.unit());
                    let im = scale * (0.5 + rng.unit());
                    T::from_parts(re, im)
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        Instance::from_json(text).unwrap_err().to_string()
    }

    #[test]
    fn malformed_instances_give_clear_errors() {
        let ok = r#"{"name": "t", "format_string": "ab,bc->ac", "shapes": [[2, 3], [3, 4]], "num_tensors": 2,
                     "paths": {"opt_flops": {"path": [[0, 1]]}}}"#;
        assert!(Instance::from_json(ok).is_ok());
        assert!(err("{").contains("not valid JSON"));
        assert!(err("[1, 2]").contains("top level must be an object"));
        assert!(err(r#"{"shapes": []}"#).contains("`format_string` must be a string"));
        assert!(err(&ok.replace("ab,bc->ac", "ab,b>->ac")).contains("`>` is not a label"));
        assert!(err(&ok.replace("[3, 4]]", "[3, -4]]")).contains("non-negative integer"));
        assert!(err(&ok.replace("[3, 4]]", "[3]]")).contains("rank"));
        assert!(err(&ok.replace("\"num_tensors\": 2", "\"num_tensors\": 3")).contains("`num_tensors` is 3"));
        assert!(err(&ok.replace("[[0, 1]]", "[[]]")).contains("must be a list of positions"));
        assert!(err(&ok.replace("[[0, 1]]", "[[0, 1, 2]]")).contains("position 2 is out of range"));
        assert!(err(&ok.replace("[[0, 1]]", "[[0, 2]]")).contains("out of range"));
        assert!(err(&ok.replace("[[0, 1]]", "[[1, 1]]")).contains("names position 1 twice"));
        assert!(err(&ok.replace("[[0, 1]]", "[]")).contains("leaves 2 operands uncontracted"));
        assert!(err(&ok.replace("\"paths\": {", "\"paths\": 3, \"x\": {")).contains("`paths` must be an object"));
        let dtype = |d: &str| ok.replace("\"num_tensors\": 2", &format!("\"num_tensors\": 2, \"dtype\": {d}"));
        assert_eq!(Instance::from_json(&dtype("\"float64\"")).unwrap().dtype, Dtype::Float64);
        assert_eq!(Instance::from_json(&dtype("\"complex128\"")).unwrap().dtype, Dtype::Complex128);
        assert_eq!(Instance::from_json(ok).unwrap().dtype, Dtype::Float64);
        for d in ["int64", "float32", "complex64", "bool"] {
            let e = err(&dtype(&format!("\"{d}\"")));
            assert!(e.contains(&format!("`t`: dtype `{d}` is not supported")), "{e}");
        }
        assert!(err(&dtype("64")).contains("`dtype` must be a string, found 64"));
    }

    #[test]
    fn random_operands_are_seeded_and_scaled() {
        let inst = Instance::from_json(r#"{"format_string": "ab,bc->ac", "shapes": [[2, 16], [16, 4]]}"#).unwrap();
        let a = inst.random_operands::<f64>(1).unwrap();
        assert_eq!(a, inst.random_operands::<f64>(1).unwrap());
        assert_ne!(a, inst.random_operands::<f64>(2).unwrap());
        // b is shared by two operands of size 16: each is scaled by 16^(-1/2).
        assert!(a[0].data().iter().all(|&x| (0.125..0.375).contains(&x)));
    }
}

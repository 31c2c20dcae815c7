//! Tensors in and out of numpy's files: `.npy` (one array) and `.npz` (a zip of `.npy`
//! files), through `ndarray-npy` (the format) and `zip` (the archive); no parsing here.
//!
//! Invariants:
//! - a file's header (dtype and shape) is read and checked before its data: the dtype must
//!   be `float64` or `complex128` (either byte order), and the bytes of the shape, in checked
//!   arithmetic, must fit the memory limit; only then is the data read;
//! - the data is read into `ndarray`'s array, then copied in logical (row-major) order, so
//!   Fortran-ordered files give the same tensor as C-ordered ones;
//! - errors name the file (and the array inside an `.npz`) and say what is wrong.
//!
//! An `.npz` holds operands in the order of numpy's `savez` names `arr_0`, `arr_1`, … when
//! every name is of that form, and in the archive's order otherwise.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read};
use std::path::{Path, PathBuf};

use einsum::{Dtype, Elem, MemoryLimit, Tensor, c64, format_bytes, tensor_bytes};
use ndarray::{ArrayD, IxDyn};
use ndarray_npy::npy::header::Header;
use ndarray_npy::{NpzWriter, ReadNpyExt, ReadableElement, WritableElement, WriteNpyExt};

use crate::cli::{CliError, CliResult};

/// An element `cgx` reads and writes: `f64` or `c64`.
pub trait NpyElem: Elem + ReadableElement + WritableElement {
    /// The dtype of the element.
    const DTYPE: Dtype;
    /// A tensor read as `f64` turned into this type (`c64`: imaginary part zero); `None`
    /// for a complex tensor where a real one is needed.
    fn from_any(t: AnyTensor) -> Option<Tensor<Self>>;
}

impl NpyElem for f64 {
    const DTYPE: Dtype = Dtype::Float64;
    fn from_any(t: AnyTensor) -> Option<Tensor<f64>> {
        match t {
            AnyTensor::F64(t) => Some(t),
            AnyTensor::C64(_) => None,
        }
    }
}

impl NpyElem for c64 {
    const DTYPE: Dtype = Dtype::Complex128;
    fn from_any(t: AnyTensor) -> Option<Tensor<c64>> {
        match t {
            AnyTensor::F64(t) => {
                let data = t.data().iter().map(|&x| c64::new(x, 0.0)).collect();
                Tensor::new(t.shape().to_vec(), data).ok()
            }
            AnyTensor::C64(t) => Some(t),
        }
    }
}

/// A tensor of one of the two dtypes.
pub enum AnyTensor {
    /// `float64`.
    F64(Tensor<f64>),
    /// `complex128`.
    C64(Tensor<c64>),
}

/// Where an array lives: a `.npy` file, or an entry of an `.npz`.
#[derive(Clone, Debug)]
pub struct Source {
    /// The file.
    pub path: PathBuf,
    /// The entry's index and name inside an `.npz`.
    pub entry: Option<(usize, String)>,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.entry {
            None => write!(f, "{}", self.path.display()),
            Some((_, name)) => write!(f, "{} (array `{name}`)", self.path.display()),
        }
    }
}

/// An array's header: where it is, its dtype and its shape.
#[derive(Clone, Debug)]
pub struct ArrayInfo {
    /// Where it is.
    pub source: Source,
    /// Its dtype.
    pub dtype: Dtype,
    /// Its shape.
    pub shape: Vec<usize>,
}

fn dtype_of(header: &Header, source: &Source) -> CliResult<Dtype> {
    // A plain dtype is a Python string literal, `'<f8'`; anything else is structured.
    let literal = header.type_descriptor.to_string();
    let Some(descr) = literal.strip_prefix('\'').and_then(|d| d.strip_suffix('\'')).map(str::to_string) else {
        return Err(CliError(format!(
            "{source}: dtype {literal} (a structured array) is not supported; einsum reads float64 and complex128"
        )));
    };
    let code = descr.trim_start_matches(['<', '>', '=', '|']);
    let dtype = match code {
        "f8" => Some(Dtype::Float64),
        "c16" => Some(Dtype::Complex128),
        _ => None,
    };
    dtype.ok_or_else(|| {
        let name = match code {
            "f4" => " (float32)",
            "f2" => " (float16)",
            "f16" | "g" => " (longdouble)",
            "c8" => " (complex64)",
            "c32" | "G" => " (clongdouble)",
            "i8" => " (int64)",
            "i4" => " (int32)",
            "i2" => " (int16)",
            "i1" => " (int8)",
            "u8" => " (uint64)",
            "u4" => " (uint32)",
            "u1" => " (uint8)",
            "b1" => " (bool)",
            _ => "",
        };
        CliError(format!(
            "{source}: dtype '{descr}'{name} is not supported; einsum reads float64 ('<f8') and complex128 ('<c16'), convert with .astype(numpy.float64)"
        ))
    })
}

fn open(path: &Path) -> CliResult<File> {
    File::open(path).map_err(|e| CliError(format!("cannot read {}: {e}", path.display())))
}

fn zip_archive(path: &Path) -> CliResult<zip::ZipArchive<BufReader<File>>> {
    zip::ZipArchive::new(BufReader::new(open(path)?))
        .map_err(|e| CliError(format!("{}: not an .npz archive: {e}", path.display())))
}

/// Checks a header's shape against the memory limit and returns its info.
fn info(header: Header, source: Source, limit: MemoryLimit) -> CliResult<ArrayInfo> {
    let dtype = dtype_of(&header, &source)?;
    let elem = if dtype == Dtype::Complex128 { 16 } else { 8 };
    let bytes = tensor_bytes(&header.shape, elem);
    if !limit.allows(bytes) {
        return Err(CliError(format!(
            "memory limit exceeded: {source} holds an array of shape {:?} that needs {}, over the limit of {limit} (see --memory-limit)",
            header.shape,
            format_bytes(bytes)
        )));
    }
    Ok(ArrayInfo { source, dtype, shape: header.shape })
}

/// The headers of the arrays of `paths`: one `.npy` file per array, or a single `.npz`
/// holding all of them. Nothing but headers is read.
pub fn read_infos(paths: &[PathBuf], limit: MemoryLimit) -> CliResult<Vec<ArrayInfo>> {
    let is_npz = |p: &Path| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("npz"));
    if paths.iter().any(|p| is_npz(p)) {
        if paths.len() != 1 {
            return Err(CliError("give the operands as one .npz or as .npy files, one per operand, not both".into()));
        }
        return npz_infos(&paths[0], limit);
    }
    paths
        .iter()
        .map(|p| {
            let source = Source { path: p.clone(), entry: None };
            let header = Header::from_reader(&mut BufReader::new(open(p)?))
                .map_err(|e| CliError(format!("{source}: not an .npy file: {e}")))?;
            info(header, source, limit)
        })
        .collect()
}

/// An `.npz`'s arrays in operand order (see the module docs).
fn npz_infos(path: &Path, limit: MemoryLimit) -> CliResult<Vec<ArrayInfo>> {
    let mut zip = zip_archive(path)?;
    let mut entries: Vec<(usize, String)> = Vec::new();
    for i in 0..zip.len() {
        let f = zip.by_index(i).map_err(|e| CliError(format!("{}: entry {i}: {e}", path.display())))?;
        if f.is_file() {
            entries.push((i, f.name().to_string()));
        }
    }
    if entries.is_empty() {
        return Err(CliError(format!("{}: the archive holds no arrays", path.display())));
    }
    let savez_number = |name: &str| {
        name.strip_suffix(".npy").and_then(|n| n.strip_prefix("arr_")).and_then(|n| n.parse::<usize>().ok())
    };
    if entries.iter().all(|(_, n)| savez_number(n).is_some()) {
        entries.sort_by_key(|(_, n)| savez_number(n));
    }
    entries
        .into_iter()
        .map(|(i, name)| {
            let name = name.strip_suffix(".npy").unwrap_or(&name).to_string();
            let source = Source { path: path.to_path_buf(), entry: Some((i, name)) };
            let mut f = zip.by_index(i).map_err(|e| CliError(format!("{source}: {e}")))?;
            let header =
                Header::from_reader(&mut f).map_err(|e| CliError(format!("{source}: not an .npy array: {e}")))?;
            info(header, source, limit)
        })
        .collect()
}

fn to_tensor<T: Elem>(a: ArrayD<T>, source: &Source) -> CliResult<Tensor<T>> {
    let shape = a.shape().to_vec();
    let data: Vec<T> = if a.is_standard_layout() { a.into_raw_vec_and_offset().0 } else { a.iter().copied().collect() };
    Tensor::from_vec(shape, data).map_err(|e| CliError(format!("{source}: {e}")))
}

fn read_from<R: Read>(reader: R, info: &ArrayInfo) -> CliResult<AnyTensor> {
    let err = |e: ndarray_npy::ReadNpyError| CliError(format!("{}: {e}", info.source));
    Ok(match info.dtype {
        Dtype::Float64 => AnyTensor::F64(to_tensor(ArrayD::<f64>::read_npy(reader).map_err(err)?, &info.source)?),
        Dtype::Complex128 => AnyTensor::C64(to_tensor(ArrayD::<c64>::read_npy(reader).map_err(err)?, &info.source)?),
    })
}

/// Reads the data of arrays whose headers [`read_infos`] checked.
pub fn read_arrays(infos: &[ArrayInfo]) -> CliResult<Vec<AnyTensor>> {
    let mut archive: Option<(PathBuf, zip::ZipArchive<BufReader<File>>)> = None;
    infos
        .iter()
        .map(|info| match &info.source.entry {
            None => read_from(BufReader::new(open(&info.source.path)?), info),
            Some((i, _)) => {
                if archive.as_ref().is_none_or(|(p, _)| *p != info.source.path) {
                    archive = Some((info.source.path.clone(), zip_archive(&info.source.path)?));
                }
                let (_, zip) = archive.as_mut().expect("just opened");
                let f = zip.by_index(*i).map_err(|e| CliError(format!("{}: {e}", info.source)))?;
                read_from(f, info)
            }
        })
        .collect()
}

fn to_array<T: Elem>(t: &Tensor<T>) -> ArrayD<T> {
    ArrayD::from_shape_vec(IxDyn(t.shape()), t.data().to_vec()).expect("a tensor's data matches its shape")
}

fn create(path: &Path) -> CliResult<BufWriter<File>> {
    File::create(path).map(BufWriter::new).map_err(|e| CliError(format!("cannot write {}: {e}", path.display())))
}

/// Writes one tensor as an `.npy` file.
pub fn write_npy<T: NpyElem>(path: &Path, t: &Tensor<T>) -> CliResult {
    to_array(t).write_npy(create(path)?).map_err(|e| CliError(format!("cannot write {}: {e}", path.display())))
}

/// Writes tensors as an `.npz` (uncompressed, as numpy's `savez`), named `arr_0`, `arr_1`, ….
pub fn write_npz<T: NpyElem>(path: &Path, tensors: &[Tensor<T>]) -> CliResult {
    let err = |e: ndarray_npy::WriteNpzError| CliError(format!("cannot write {}: {e}", path.display()));
    let mut npz = NpzWriter::new(create(path)?);
    for (i, t) in tensors.iter().enumerate() {
        npz.add_array(format!("arr_{i}"), &to_array(t)).map_err(err)?;
    }
    npz.finish().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cgx-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    #[test]
    fn npy_and_npz_round_trip_both_dtypes() {
        let a = Tensor::from_fn(vec![2, 3], |i| (10 * i[0] + i[1]) as f64).unwrap();
        let z = Tensor::from_fn(vec![3], |i| c64::new(i[0] as f64, -1.5)).unwrap();
        let (pa, pz, pnpz) = (tmp("a.npy"), tmp("z.npy"), tmp("ab.npz"));
        write_npy(&pa, &a).unwrap();
        write_npy(&pz, &z).unwrap();
        write_npz(&pnpz, &[a.clone(), a.map(|x| -x)]).unwrap();
        let infos = read_infos(&[pa.clone(), pz.clone()], MemoryLimit::default()).unwrap();
        assert_eq!((infos[0].dtype, infos[1].dtype), (Dtype::Float64, Dtype::Complex128));
        assert_eq!(infos[1].shape, vec![3]);
        let read = read_arrays(&infos).unwrap();
        assert!(matches!(&read[0], AnyTensor::F64(t) if *t == a));
        assert!(matches!(&read[1], AnyTensor::C64(t) if *t == z));
        let infos = read_infos(std::slice::from_ref(&pnpz), MemoryLimit::default()).unwrap();
        assert_eq!(infos.len(), 2);
        assert_eq!(infos[1].source.to_string(), format!("{} (array `arr_1`)", pnpz.display()));
        let read = read_arrays(&infos).unwrap();
        assert!(matches!(&read[1], AnyTensor::F64(t) if t.get(&[1, 2]) == Some(-12.0)));
        // The limit is checked on the header, before the data is read.
        let e = read_infos(&[pa], MemoryLimit::Bytes(47)).unwrap_err().0;
        assert!(e.contains("a.npy holds an array of shape [2, 3] that needs 48 bytes"), "{e}");
        assert!(c64::from_any(AnyTensor::F64(a)).is_some());
        assert!(f64::from_any(AnyTensor::C64(z)).is_none());
    }

    #[test]
    fn unreadable_files_are_errors_naming_them() {
        let bad = tmp("bad.npy");
        std::fs::write(&bad, b"not numpy").unwrap();
        let e = read_infos(std::slice::from_ref(&bad), MemoryLimit::default()).unwrap_err().0;
        assert!(e.contains("bad.npy: not an .npy file"), "{e}");
        let e = read_infos(&[tmp("missing.npy")], MemoryLimit::default()).unwrap_err().0;
        assert!(e.starts_with("cannot read") && e.contains("missing.npy"), "{e}");
        let badz = tmp("bad.npz");
        std::fs::write(&badz, b"not a zip").unwrap();
        let e = read_infos(std::slice::from_ref(&badz), MemoryLimit::default()).unwrap_err().0;
        assert!(e.contains("bad.npz: not an .npz archive"), "{e}");
        let e = read_infos(&[badz, bad], MemoryLimit::default()).unwrap_err().0;
        assert!(e.contains("one .npz or as .npy files"), "{e}");
    }
}

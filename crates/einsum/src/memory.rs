//! Memory as an error, not an abort: [`MemoryLimit`], the byte counts of tensors in checked
//! arithmetic, and the parsing and printing of byte sizes (`2GiB`, `500MB`, `1048576`).
//!
//! Invariants:
//! - every byte count is computed with checked arithmetic; a count that does not fit a
//!   `u64` is `None`, reported as "more than 2^64 bytes", never wrapped;
//! - [`crate::Einsum`] checks every tensor its path holds (each operand, each step's
//!   intermediate, the output) and the running total of live tensors against the limit
//!   before the graph is built, so evaluation never allocates a tensor the check has not
//!   seen. Kernel scratch (a packed copy of an operand, at most the size of the largest
//!   operand of a step) is not counted: the limit is a budget for tensors, not an RSS cap.
//!
//! The default, [`MemoryLimit::default`], is the one memory policy of the library, the
//! `cgx` command line and the Python package: half of the physical memory or half of the
//! address-space limit (`ulimit -v`), whichever is smaller, and at most
//! [`DEFAULT_MEMORY_LIMIT`] (8 GiB); 8 GiB where neither is known. 8 GiB is large enough
//! for every shared benchmark instance with its gradient (MERA open 26 peaks at 2.09 GB),
//! small enough that a mistyped dimension fails at once instead of paging a workstation
//! to death; half of the machine leaves the other half to the operands' owner and the
//! rest of the system. The machine is read once per process (`/proc/meminfo` and
//! `/proc/self/limits`; elsewhere neither is known).

use std::fmt;

/// The most the default memory limit ([`MemoryLimit::default`]) allows: 8 GiB.
pub const DEFAULT_MEMORY_LIMIT: u64 = 8 << 30;

/// A budget in bytes for the tensors of a contraction, or no budget at all.
///
/// ```
/// use einsum::MemoryLimit;
///
/// assert_eq!("2GiB".parse::<MemoryLimit>().unwrap(), MemoryLimit::Bytes(2 << 30));
/// assert_eq!("500MB".parse::<MemoryLimit>().unwrap(), MemoryLimit::Bytes(500_000_000));
/// assert_eq!("1.5 KiB".parse::<MemoryLimit>().unwrap(), MemoryLimit::Bytes(1536));
/// assert_eq!("4096".parse::<MemoryLimit>().unwrap(), MemoryLimit::Bytes(4096));
/// assert_eq!("none".parse::<MemoryLimit>().unwrap(), MemoryLimit::Unlimited);
/// assert!("2 parsecs".parse::<MemoryLimit>().is_err());
/// // The machine's policy (module docs): at most 8 GiB.
/// assert!(MemoryLimit::default() <= MemoryLimit::Bytes(8 << 30));
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemoryLimit {
    /// At most this many bytes.
    Bytes(u64),
    /// No check (allocation failures then abort the process, as Rust's allocator does).
    Unlimited,
}

impl Default for MemoryLimit {
    /// The policy of the module docs for this machine (read once per process).
    fn default() -> Self {
        static MACHINE: std::sync::OnceLock<MemoryLimit> = std::sync::OnceLock::new();
        *MACHINE.get_or_init(|| MemoryLimit::policy(physical_memory(), address_space_limit()))
    }
}

/// The machine's physical memory in bytes (`MemTotal` of `/proc/meminfo`), if known.
fn physical_memory() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The process's address-space limit in bytes (`ulimit -v`), if there is one.
fn address_space_limit() -> Option<u64> {
    // "Max address space   <soft> <hard> bytes"; `unlimited` does not parse and is no bound.
    let l = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = l.lines().find(|l| l.starts_with("Max address space"))?;
    line.trim_start_matches("Max address space").split_whitespace().next()?.parse::<u64>().ok()
}

impl MemoryLimit {
    /// The default policy (module docs) for a machine of `physical` bytes of memory and an
    /// address-space limit of `address_space` bytes, each `None` when unknown or absent.
    ///
    /// ```
    /// use einsum::MemoryLimit;
    /// let gib = |g: u64| g << 30;
    /// assert_eq!(MemoryLimit::policy(Some(gib(64)), None), MemoryLimit::Bytes(gib(8)));
    /// assert_eq!(MemoryLimit::policy(Some(gib(6)), None), MemoryLimit::Bytes(gib(3)));
    /// assert_eq!(MemoryLimit::policy(Some(gib(64)), Some(gib(4))), MemoryLimit::Bytes(gib(2)));
    /// assert_eq!(MemoryLimit::policy(None, None), MemoryLimit::Bytes(gib(8)));
    /// ```
    pub fn policy(physical: Option<u64>, address_space: Option<u64>) -> MemoryLimit {
        let half = [physical, address_space].into_iter().flatten().map(|b| b / 2).min();
        MemoryLimit::Bytes(half.map_or(DEFAULT_MEMORY_LIMIT, |b| b.min(DEFAULT_MEMORY_LIMIT)))
    }

    /// Whether `bytes` (`None`: more than 2^64) fits.
    pub fn allows(self, bytes: Option<u64>) -> bool {
        match (self, bytes) {
            (MemoryLimit::Unlimited, _) => true,
            (MemoryLimit::Bytes(limit), Some(b)) => b <= limit,
            (MemoryLimit::Bytes(_), None) => false,
        }
    }
}

impl fmt::Display for MemoryLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryLimit::Bytes(b) => f.write_str(&format_bytes(Some(*b))),
            MemoryLimit::Unlimited => f.write_str("unlimited"),
        }
    }
}

/// Why a byte size did not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseBytesError(String);

impl fmt::Display for ParseBytesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` is not a byte size (write it like 2GiB, 500MB, 1.5TiB, 1048576 or none)", self.0)
    }
}

impl std::error::Error for ParseBytesError {}

impl std::str::FromStr for MemoryLimit {
    type Err = ParseBytesError;

    /// A number (decimal point allowed) and an optional unit, case-insensitive: `B`,
    /// decimal `KB MB GB TB` (10^3 steps), binary `KiB MiB GiB TiB` (2^10 steps); or
    /// `none` / `unlimited`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseBytesError(s.to_string());
        let t = s.trim();
        if t.eq_ignore_ascii_case("none") || t.eq_ignore_ascii_case("unlimited") {
            return Ok(MemoryLimit::Unlimited);
        }
        let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(t.len());
        let (number, unit) = t.split_at(split);
        let unit = unit.trim().to_ascii_lowercase();
        let scale: u64 = match unit.as_str() {
            "" | "b" => 1,
            "kb" => 1_000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            "tb" => 1_000_000_000_000,
            "kib" => 1 << 10,
            "mib" => 1 << 20,
            "gib" => 1 << 30,
            "tib" => 1 << 40,
            _ => return Err(err()),
        };
        let number = number.replace('_', "");
        if number.is_empty() {
            return Err(err());
        }
        let bytes = if let Ok(n) = number.parse::<u64>() {
            n.checked_mul(scale).ok_or_else(err)?
        } else {
            let x = number.parse::<f64>().map_err(|_| err())? * scale as f64;
            if !(0.0..1.8e19).contains(&x) {
                return Err(err());
            }
            x.round() as u64
        };
        Ok(MemoryLimit::Bytes(bytes))
    }
}

/// The bytes of a tensor of `shape` with elements of `elem_bytes` bytes, `None` if the count
/// overflows a `u64`.
pub fn tensor_bytes(shape: &[usize], elem_bytes: usize) -> Option<u64> {
    shape.iter().try_fold(elem_bytes as u64, |acc, &d| acc.checked_mul(d as u64))
}

/// `Some(1288490188)` → `"1.2 GiB (1288490188 bytes)"`-style text: binary units above 1 KiB,
/// the exact count beside them; `None` → `"more than 2^64 bytes"`.
///
/// ```
/// assert_eq!(einsum::format_bytes(Some(8 << 40)), "8 TiB");
/// assert_eq!(einsum::format_bytes(Some(1536)), "1.5 KiB (1536 bytes)");
/// assert_eq!(einsum::format_bytes(Some(12)), "12 bytes");
/// assert_eq!(einsum::format_bytes(None), "more than 2^64 bytes");
/// ```
pub fn format_bytes(bytes: Option<u64>) -> String {
    let Some(b) = bytes else { return "more than 2^64 bytes".into() };
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if b < 1024 {
        return format!("{b} bytes");
    }
    let (mut x, mut u) = (b as f64 / 1024.0, 0);
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    let exact = b % (1u64 << (10 * (u + 1))) == 0;
    if exact { format!("{x:.0} {}", UNITS[u]) } else { format!("{x:.1} {} ({b} bytes)", UNITS[u]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_every_spelling_and_reject_the_rest() {
        let b = |s: &str| s.parse::<MemoryLimit>();
        assert_eq!(b("2GiB"), Ok(MemoryLimit::Bytes(2 << 30)));
        assert_eq!(b("2gib"), Ok(MemoryLimit::Bytes(2 << 30)));
        assert_eq!(b(" 500 MB "), Ok(MemoryLimit::Bytes(500_000_000)));
        assert_eq!(b("1_000"), Ok(MemoryLimit::Bytes(1000)));
        assert_eq!(b("0.5KiB"), Ok(MemoryLimit::Bytes(512)));
        assert_eq!(b("12B"), Ok(MemoryLimit::Bytes(12)));
        assert_eq!(b("Unlimited"), Ok(MemoryLimit::Unlimited));
        for bad in ["", "GiB", "2 GiBs", "-1", "1e3", "99999999999TiB", "1.2.3", "2 G"] {
            assert!(b(bad).is_err(), "{bad}");
        }
        assert!(b("x").unwrap_err().to_string().contains("`x` is not a byte size"));
    }

    #[test]
    fn byte_counts_are_checked() {
        assert_eq!(tensor_bytes(&[2, 3], 8), Some(48));
        assert_eq!(tensor_bytes(&[], 16), Some(16));
        assert_eq!(tensor_bytes(&[1 << 40, 1 << 30], 8), None);
        assert!(MemoryLimit::Bytes(48).allows(Some(48)));
        assert!(!MemoryLimit::Bytes(47).allows(Some(48)));
        assert!(!MemoryLimit::Bytes(u64::MAX).allows(None));
        assert!(MemoryLimit::Unlimited.allows(None));
    }
}

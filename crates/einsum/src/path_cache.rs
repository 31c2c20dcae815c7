//! Paths kept on disk: [`PathCache`] stores the path (and the sliced labels) a search found
//! for a network, keyed by the network's structure, so a second run plans nothing.
//!
//! The key is canonical: labels renumbered in order of first appearance (inputs in order,
//! then the output), with each label's size and the finder's description, so the same
//! network spelled with other letters, or numbered otherwise, finds the same entry. Sliced
//! labels are stored in the canonical numbering and mapped back on the way out.
//!
//! An entry is one JSON file, `<hash>.json`, named by a 64-bit FNV-1a hash of the key and
//! holding the key itself, which a read compares whole: a hash collision is a miss, never a
//! wrong path. Writes go to a temporary file first and are renamed into place, so readers
//! in other processes never see half an entry. A file that does not parse, or whose path
//! is not valid for the network, is a miss.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::error::{EinsumError, EinsumResult};
use crate::path::ContractionPath;

/// A directory of cached paths (see the module docs).
///
/// ```
/// use einsum::ContractionPath;
/// use einsum::path_cache::{CachedPath, PathCache};
///
/// let dir = std::env::temp_dir().join(format!("einsum-doc-cache-{}", std::process::id()));
/// let cache = PathCache::new(&dir).unwrap();
/// // The same chain, numbered two ways.
/// let key = PathCache::key(&[vec![0, 1], vec![1, 2]], &[0, 2], &[2, 3, 4], "greedy");
/// let same = PathCache::key(&[vec![7, 5], vec![5, 6]], &[7, 6], &[0, 0, 0, 0, 0, 3, 4, 2], "greedy");
/// assert_eq!(key, same);
/// assert!(cache.get(&key).is_none());
/// cache.put(&key, &CachedPath { path: ContractionPath::new(vec![[0, 1]]), sliced: vec![1] }).unwrap();
/// let hit = cache.get(&same).unwrap();
/// assert_eq!(hit.path, ContractionPath::new(vec![[0, 1]]));
/// assert_eq!(same.labels(&hit.sliced), vec![5]); // label 1 of the first numbering is 5 here
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
#[derive(Clone, Debug)]
pub struct PathCache {
    dir: PathBuf,
}

/// A network's canonical key, and the map from canonical labels back to the caller's.
#[derive(Clone, Debug)]
pub struct CacheKey {
    text: String,
    /// The caller's label of each canonical label.
    original: Vec<u32>,
    /// The caller's numbering as canonical labels (`u32::MAX` for labels not in the network).
    canonical: Vec<u32>,
    operands: usize,
}

impl PartialEq for CacheKey {
    fn eq(&self, o: &Self) -> bool {
        self.text == o.text
    }
}

impl CacheKey {
    /// The caller's labels of canonical labels.
    pub fn labels(&self, canonical: &[u32]) -> Vec<u32> {
        canonical.iter().filter_map(|&c| self.original.get(c as usize).copied()).collect()
    }

    /// Canonical labels of the caller's labels (labels not in the network are dropped).
    pub fn canonical(&self, labels: &[u32]) -> Vec<u32> {
        labels.iter().filter_map(|&c| self.canonical.get(c as usize).copied().filter(|&k| k != u32::MAX)).collect()
    }
}

/// What an entry holds: the path and the sliced labels (canonical numbering in the file, the
/// caller's from [`PathCache::get`] once mapped with [`CacheKey::labels`]).
#[derive(Clone, Debug, PartialEq)]
pub struct CachedPath {
    /// The path, in opt_einsum's format.
    pub path: ContractionPath,
    /// The sliced labels.
    pub sliced: Vec<u32>,
}

impl PathCache {
    /// A cache in `dir`, created if missing.
    pub fn new(dir: impl AsRef<Path>) -> EinsumResult<Self> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| EinsumError::Search(format!("path cache {}: {e}", dir.display())))?;
        Ok(PathCache { dir })
    }

    /// The canonical key of a numbered network searched by `finder` (a description of the
    /// search and its settings: entries of different finders never mix).
    pub fn key(inputs: &[Vec<u32>], output: &[u32], sizes: &[usize], finder: &str) -> CacheKey {
        let mut canonical = vec![u32::MAX; sizes.len()];
        let mut original = Vec::new();
        let mut number = |c: u32| -> u32 {
            let slot = &mut canonical[c as usize];
            if *slot == u32::MAX {
                *slot = original.len() as u32;
                original.push(c);
            }
            *slot
        };
        let ins: Vec<Vec<u32>> = inputs.iter().map(|l| l.iter().map(|&c| number(c)).collect()).collect();
        let out: Vec<u32> = output.iter().map(|&c| number(c)).collect();
        let sizes: Vec<usize> = original.iter().map(|&c| sizes[c as usize]).collect();
        let text = json!({ "finder": finder, "inputs": ins, "output": out, "sizes": sizes }).to_string();
        CacheKey { text, original, canonical, operands: inputs.len() }
    }

    fn file(&self, key: &CacheKey) -> PathBuf {
        // FNV-1a, 64 bits: a stable name across runs and builds (std's hashers promise
        // neither).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key.text.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.dir.join(format!("{h:016x}.json"))
    }

    /// The entry for `key`, with its sliced labels in canonical numbering (map them with
    /// [`CacheKey::labels`]); `None` when there is none or it does not fit the network.
    pub fn get(&self, key: &CacheKey) -> Option<CachedPath> {
        let text = std::fs::read_to_string(self.file(key)).ok()?;
        let v: Value = serde_json::from_str(&text).ok()?;
        if v.get("key")?.as_str()? != key.text {
            return None;
        }
        let steps: Vec<Vec<usize>> = serde_json::from_value(v.get("path")?.clone()).ok()?;
        let sliced: Vec<u32> = serde_json::from_value(v.get("sliced")?.clone()).ok()?;
        let path = ContractionPath::from_steps(steps);
        path.validate(key.operands).ok()?;
        if sliced.iter().any(|&c| c as usize >= key.original.len()) {
            return None;
        }
        Some(CachedPath { path, sliced })
    }

    /// Stores `entry` (its sliced labels in canonical numbering, [`CacheKey::canonical`])
    /// under `key`.
    pub fn put(&self, key: &CacheKey, entry: &CachedPath) -> EinsumResult<()> {
        let file = self.file(key);
        let text = json!({ "key": key.text, "path": entry.path.steps(), "sliced": entry.sliced }).to_string();
        // A temporary name no other writer, thread or process, uses at the same time.
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = file.with_extension(format!("tmp{}-{n}", std::process::id()));
        let io = |e: std::io::Error| EinsumError::Search(format!("path cache {}: {e}", file.display()));
        std::fs::write(&tmp, text).map_err(io)?;
        std::fs::rename(&tmp, &file).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_by_size_finder_and_structure_and_bad_entries_are_misses() {
        let base = PathCache::key(&[vec![0, 1], vec![1, 2]], &[0, 2], &[2, 3, 4], "hyper");
        assert_ne!(base, PathCache::key(&[vec![0, 1], vec![1, 2]], &[0, 2], &[2, 3, 5], "hyper"));
        assert_ne!(base, PathCache::key(&[vec![0, 1], vec![1, 2]], &[0, 2], &[2, 3, 4], "greedy"));
        assert_ne!(base, PathCache::key(&[vec![0, 1], vec![2, 1]], &[0, 2], &[2, 3, 4], "hyper"));
        let dir = std::env::temp_dir().join(format!("einsum-cache-test-{}", std::process::id()));
        let cache = PathCache::new(&dir).unwrap();
        // A path naming an operand the network does not have is a miss, not a wrong path.
        cache.put(&base, &CachedPath { path: ContractionPath::new(vec![[0, 5]]), sliced: vec![] }).unwrap();
        assert!(cache.get(&base).is_none());
        std::fs::write(cache.file(&base), "not json").unwrap();
        assert!(cache.get(&base).is_none());
        cache.put(&base, &CachedPath { path: ContractionPath::new(vec![[1, 0]]), sliced: vec![1] }).unwrap();
        assert_eq!(cache.get(&base).unwrap().sliced, vec![1]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

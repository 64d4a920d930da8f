//! Where the agent gets the chart of a plan.
//!
//! The runtime holds an `Arc<dyn` [`ChartSource`]`>` and asks it for the chart of each plan
//! ([`ChartSource::chart`]). Two sources exist:
//!
//! - [`LocalCharts`]: charts already loaded, held in memory by digest. Plan-file mode
//!   registers the chart of each plan file here (its digest is computed over the chart's
//!   files, not over an archive, so nothing is verified).
//! - [`CachedCharts`]: a bounded on-disk cache of chart archives in front of an
//!   [`ArchiveFetcher`] (the hub session's `GetChart` stream, or [`DirectoryArchives`] for a
//!   directory of `.tgz` files), with a small in-memory cache of loaded charts so that the
//!   many releases of one chart load it once.
//!
//! Guarantees of [`CachedCharts`]:
//!
//! - **Verified.** An archive is hashed against its digest before it is parsed, both when it
//!   is read from the cache and when it is fetched. A cached file that does not match is
//!   removed and fetched again; fetched bytes that do not match are
//!   [`ChartError::DigestMismatch`] and are never written.
//! - **Atomic writes.** An archive is written to a temporary file in the cache directory and
//!   renamed to `<hex digest>.tgz`; a crash leaves at worst a stray `.tmp-*` file (removed at
//!   the next start) or a torn file, which verification catches. No fsync is needed for that.
//! - **Bounded.** After each insert the least recently used archives are removed until the
//!   total size is at most `max_bytes`. Use is tracked in memory (every request, including
//!   those served from the in-memory cache, counts) and on disk through the file's mtime,
//!   set when it is written or read; a new [`CachedCharts`] orders the files it finds by
//!   mtime. An archive larger than the bound alone is served but not kept.
//! - **Single flight.** Concurrent requests for one digest read or fetch it once; the others
//!   wait for that result (success or error). If the request doing the work is cancelled,
//!   a waiting one takes over.
//! - **Off the async workers.** File IO, hashing and parsing (gunzip, untar, YAML) run in
//!   `tokio::task::spawn_blocking`.
//!
//! One process owns a cache directory: two agents sharing one could evict each other's files
//! (every read is verified, so this costs fetches, never a wrong chart).

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use flotilla_chart::{Chart, LoadError};
use flotilla_core::ids::ChartDigest;
use flotilla_core::plan::ChartArtifact;
use futures::future::BoxFuture;
use tokio::sync::watch;

/// How many loaded charts [`CachedCharts`] keeps in memory unless told otherwise.
pub const DEFAULT_LOADED_CHARTS: usize = 32;

/// Prefix of the temporary files of atomic writes.
const TEMP_PREFIX: &str = ".tmp-";

/// Why the chart of a plan could not be had.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ChartError {
    /// No source holds an archive with this digest.
    #[error("chart {digest}: not found")]
    NotFound {
        /// The digest asked for.
        digest: ChartDigest,
    },
    /// Bytes given for a digest hash to another one.
    #[error("chart archive has digest {actual}, expected {expected}")]
    DigestMismatch {
        /// The digest asked for.
        expected: ChartDigest,
        /// The digest of the bytes received.
        actual: ChartDigest,
    },
    /// The archive matches its digest but is not a chart Helm would load.
    #[error("chart {digest}: cannot load the archive")]
    Load {
        /// The archive's digest.
        digest: ChartDigest,
        /// The loader's error.
        #[source]
        source: Arc<LoadError>,
    },
    /// Reading or writing a file failed.
    #[error("{}: cannot read or write", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: Arc<io::Error>,
    },
    /// The fetcher failed (the hub is unreachable, the stream broke, ...).
    #[error("chart {digest}: fetch failed: {message}")]
    Fetch {
        /// The digest asked for.
        digest: ChartDigest,
        /// What went wrong.
        message: String,
    },
    /// The blocking task reading or loading the archive panicked or was cancelled.
    #[error("chart {digest}: loader task failed: {message}")]
    Internal {
        /// The archive's digest.
        digest: ChartDigest,
        /// The task's error.
        message: String,
    },
}

impl ChartError {
    /// An IO error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        ChartError::Io {
            path: path.into(),
            source: Arc::new(source),
        }
    }

    /// A bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ChartError::NotFound { .. } => "not_found",
            ChartError::DigestMismatch { .. } => "digest_mismatch",
            ChartError::Load { .. } => "load",
            ChartError::Io { .. } => "io",
            ChartError::Fetch { .. } => "fetch",
            ChartError::Internal { .. } => "internal",
        }
    }

    /// Whether retrying later may help: a fetch or IO failure, or bytes damaged on the way
    /// (the next fetch may bring them intact). An absent chart or one that does not load
    /// stays so until the plan changes.
    pub fn is_transient(&self) -> bool {
        match self {
            ChartError::DigestMismatch { .. }
            | ChartError::Io { .. }
            | ChartError::Fetch { .. } => true,
            ChartError::NotFound { .. } | ChartError::Load { .. } | ChartError::Internal { .. } => {
                false
            }
        }
    }
}

/// Where the agent gets the chart of a plan.
pub trait ChartSource: Send + Sync + fmt::Debug {
    /// The loaded chart of `artifact` (looked up by its digest).
    fn chart<'a>(
        &'a self,
        artifact: &'a ChartArtifact,
    ) -> BoxFuture<'a, Result<Arc<Chart>, ChartError>>;
}

/// Fetches chart archives by digest from somewhere (the hub session implements it over its
/// `GetChart` stream). The bytes need not be verified: [`CachedCharts`] does it.
pub trait ArchiveFetcher: Send + Sync + fmt::Debug {
    /// The archive (`.tgz` bytes) whose sha256 is `digest`; [`ChartError::NotFound`] when
    /// the source has none.
    fn fetch<'a>(&'a self, digest: &'a ChartDigest) -> BoxFuture<'a, Result<Vec<u8>, ChartError>>;
}

/// Locks `m`, recovering from poisoning: every critical section here leaves its data
/// consistent at each step.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `f` on the blocking pool; a panic or cancellation is [`ChartError::Internal`].
async fn blocking<T: Send + 'static>(
    digest: &ChartDigest,
    f: impl FnOnce() -> Result<T, ChartError> + Send + 'static,
) -> Result<T, ChartError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(ChartError::Internal {
            digest: digest.clone(),
            message: e.to_string(),
        })
    })
}

/// Hashes `bytes` and parses them as a chart archive if they match `digest`.
fn verify_and_load(digest: &ChartDigest, bytes: &[u8]) -> Result<Chart, ChartError> {
    let actual = ChartDigest::of_bytes(bytes);
    if actual != *digest {
        return Err(ChartError::DigestMismatch {
            expected: digest.clone(),
            actual,
        });
    }
    flotilla_chart::load_archive(bytes).map_err(|source| ChartError::Load {
        digest: digest.clone(),
        source: Arc::new(source),
    })
}

// ---------------------------------------------------------------------------------------
// LocalCharts

/// Charts held in memory by digest (plan-file mode registers each plan file's loaded chart).
#[derive(Default)]
pub struct LocalCharts {
    charts: Mutex<HashMap<ChartDigest, Arc<Chart>>>,
}

impl LocalCharts {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `chart` under `digest` (replacing any chart registered under it).
    pub fn insert(&self, digest: ChartDigest, chart: Chart) {
        lock(&self.charts).insert(digest, Arc::new(chart));
    }

    /// Forgets the chart registered under `digest`; whether there was one.
    pub fn remove(&self, digest: &ChartDigest) -> bool {
        lock(&self.charts).remove(digest).is_some()
    }

    /// The chart registered under `digest`.
    pub fn get(&self, digest: &ChartDigest) -> Result<Arc<Chart>, ChartError> {
        lock(&self.charts)
            .get(digest)
            .cloned()
            .ok_or_else(|| ChartError::NotFound {
                digest: digest.clone(),
            })
    }
}

impl fmt::Debug for LocalCharts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalCharts")
            .field("charts", &lock(&self.charts).len())
            .finish()
    }
}

impl ChartSource for LocalCharts {
    fn chart<'a>(
        &'a self,
        artifact: &'a ChartArtifact,
    ) -> BoxFuture<'a, Result<Arc<Chart>, ChartError>> {
        let result = self.get(&artifact.digest);
        Box::pin(async move { result })
    }
}

// ---------------------------------------------------------------------------------------
// CachedCharts

/// The archives on disk: sizes and use order.
#[derive(Debug, Default)]
struct DiskIndex {
    entries: HashMap<ChartDigest, DiskEntry>,
    total: u64,
    /// Logical time of the last use; grows by one per use.
    clock: u64,
}

#[derive(Debug, Clone, Copy)]
struct DiskEntry {
    size: u64,
    last_use: u64,
}

impl DiskIndex {
    fn contains(&self, digest: &ChartDigest) -> bool {
        self.entries.contains_key(digest)
    }

    /// Marks `digest` used now (if it is on disk).
    fn touch(&mut self, digest: &ChartDigest) {
        if let Some(e) = self.entries.get_mut(digest) {
            self.clock += 1;
            e.last_use = self.clock;
        }
    }

    /// Records `digest` as on disk, used now.
    fn insert(&mut self, digest: ChartDigest, size: u64) {
        self.clock += 1;
        let entry = DiskEntry {
            size,
            last_use: self.clock,
        };
        if let Some(old) = self.entries.insert(digest, entry) {
            self.total -= old.size;
        }
        self.total += size;
    }

    fn remove(&mut self, digest: &ChartDigest) {
        if let Some(old) = self.entries.remove(digest) {
            self.total -= old.size;
        }
    }

    /// Removes the least recently used entries until the total is at most `max_bytes`;
    /// returns them, least recently used first.
    fn evict(&mut self, max_bytes: u64) -> Vec<ChartDigest> {
        let mut victims = Vec::new();
        if self.total <= max_bytes {
            return victims;
        }
        let mut order: Vec<(u64, ChartDigest)> = self
            .entries
            .iter()
            .map(|(d, e)| (e.last_use, d.clone()))
            .collect();
        order.sort();
        for (_, digest) in order {
            if self.total <= max_bytes {
                break;
            }
            self.remove(&digest);
            victims.push(digest);
        }
        victims
    }

    /// The digests, least recently used first.
    fn digests(&self) -> Vec<ChartDigest> {
        let mut order: Vec<(u64, &ChartDigest)> =
            self.entries.iter().map(|(d, e)| (e.last_use, d)).collect();
        order.sort();
        order.into_iter().map(|(_, d)| d.clone()).collect()
    }
}

/// The cache directory and its index. Every change to the directory's `<hex>.tgz` names
/// (rename in, remove) happens under the index lock, so the index and the directory agree;
/// reads happen outside it (a file removed under a reader is a cache miss).
#[derive(Debug)]
struct Disk {
    dir: PathBuf,
    max_bytes: u64,
    index: Mutex<DiskIndex>,
    temp_counter: AtomicU64,
}

impl Disk {
    fn path(&self, digest: &ChartDigest) -> PathBuf {
        self.dir.join(format!("{}.tgz", digest.hex()))
    }

    /// Opens (creating) `dir` and indexes the archives in it, oldest mtime first; removes
    /// stale temporary files and evicts down to `max_bytes`.
    fn open(dir: PathBuf, max_bytes: u64) -> Result<Self, ChartError> {
        std::fs::create_dir_all(&dir).map_err(|e| ChartError::io(&dir, e))?;
        let mut found: Vec<(SystemTime, ChartDigest, u64)> = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| ChartError::io(&dir, e))? {
            let entry = entry.map_err(|e| ChartError::io(&dir, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with(TEMP_PREFIX) {
                if let Err(e) = std::fs::remove_file(entry.path())
                    && e.kind() != io::ErrorKind::NotFound
                {
                    return Err(ChartError::io(entry.path(), e));
                }
                continue;
            }
            let Some(digest) = name
                .strip_suffix(".tgz")
                .and_then(|hex| ChartDigest::new(format!("sha256:{hex}")).ok())
            else {
                continue;
            };
            let md = entry
                .metadata()
                .map_err(|e| ChartError::io(entry.path(), e))?;
            if !md.is_file() {
                continue;
            }
            let mtime = md.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            found.push((mtime, digest, md.len()));
        }
        found.sort();
        let mut index = DiskIndex::default();
        for (_, digest, size) in found {
            index.insert(digest, size);
        }
        let disk = Disk {
            dir,
            max_bytes,
            index: Mutex::new(index),
            temp_counter: AtomicU64::new(0),
        };
        {
            let mut index = lock(&disk.index);
            let victims = index.evict(max_bytes);
            disk.remove_files(&victims);
        }
        Ok(disk)
    }

    /// Removes evicted archives (best effort: a file left behind is not indexed, so it is
    /// found again at the next start).
    fn remove_files(&self, victims: &[ChartDigest]) {
        for digest in victims {
            let path = self.path(digest);
            match std::fs::remove_file(&path) {
                Ok(()) => tracing::debug!(digest = %digest, "chart archive evicted from the cache"),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(
                    digest = %digest,
                    path = %path.display(),
                    error = %e,
                    "cannot remove an evicted chart archive"
                ),
            }
        }
    }

    /// Forgets `digest` and removes its file (it is missing or damaged).
    fn discard(&self, digest: &ChartDigest) {
        let mut index = lock(&self.index);
        index.remove(digest);
        if let Err(e) = std::fs::remove_file(self.path(digest))
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(
                digest = %digest,
                path = %self.path(digest).display(),
                error = %e,
                "cannot remove a damaged chart archive"
            );
        }
    }

    /// Reads, verifies and loads the cached archive of `digest` and marks it used (mtime).
    /// `None` when it is not there or is damaged (then it is removed). Blocking.
    fn read(&self, digest: &ChartDigest) -> Result<Option<Chart>, ChartError> {
        let path = self.path(digest);
        let read = std::fs::File::open(&path).and_then(|mut file| {
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)?;
            // Best effort: the mtime orders the files when the next process starts.
            let _ = file.set_modified(SystemTime::now());
            Ok(bytes)
        });
        let bytes = match read {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                lock(&self.index).remove(digest);
                return Ok(None);
            }
            Err(e) => return Err(ChartError::io(path, e)),
        };
        match verify_and_load(digest, &bytes) {
            Ok(chart) => Ok(Some(chart)),
            Err(ChartError::DigestMismatch { actual, .. }) => {
                tracing::warn!(
                    digest = %digest,
                    actual = %actual,
                    path = %path.display(),
                    "cached chart archive does not match its digest; removed"
                );
                self.discard(digest);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Writes the (verified) archive of `digest` atomically and evicts down to the bound.
    /// Blocking.
    fn write(&self, digest: &ChartDigest, bytes: &[u8]) -> io::Result<()> {
        let n = self.temp_counter.fetch_add(1, Ordering::Relaxed);
        let temp = self.dir.join(format!(
            "{TEMP_PREFIX}{}-{}-{n}",
            digest.hex(),
            std::process::id()
        ));
        let written = std::fs::File::create_new(&temp).and_then(|mut f| f.write_all(bytes));
        let renamed = written.and_then(|()| {
            let mut index = lock(&self.index);
            std::fs::rename(&temp, self.path(digest))?;
            index.insert(digest.clone(), bytes.len() as u64);
            let victims = index.evict(self.max_bytes);
            self.remove_files(&victims);
            Ok(())
        });
        if renamed.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        renamed
    }
}

/// Loaded charts, bounded by count, least recently used dropped first.
#[derive(Debug)]
struct Loaded {
    capacity: usize,
    entries: HashMap<ChartDigest, (Arc<Chart>, u64)>,
    clock: u64,
}

impl Loaded {
    fn get(&mut self, digest: &ChartDigest) -> Option<Arc<Chart>> {
        let (chart, last_use) = self.entries.get_mut(digest)?;
        self.clock += 1;
        *last_use = self.clock;
        Some(chart.clone())
    }

    fn insert(&mut self, digest: ChartDigest, chart: Arc<Chart>) {
        if self.capacity == 0 {
            return;
        }
        self.clock += 1;
        self.entries.insert(digest, (chart, self.clock));
        while self.entries.len() > self.capacity {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, (_, last_use))| *last_use)
                .map(|(d, _)| d.clone());
            match oldest {
                Some(d) => self.entries.remove(&d),
                None => break,
            };
        }
    }
}

/// The result a request in flight hands to the requests waiting on it.
type Flight = watch::Receiver<Option<Result<Arc<Chart>, ChartError>>>;

/// What a request does for a digest: the work, or wait for the request doing it.
enum Role {
    Lead(watch::Sender<Option<Result<Arc<Chart>, ChartError>>>),
    Follow(Flight),
}

/// Removes a request's in-flight entry when the request ends, finished or cancelled.
struct FlightGuard<'a> {
    inflight: &'a Mutex<HashMap<ChartDigest, Flight>>,
    digest: &'a ChartDigest,
}

impl Drop for FlightGuard<'_> {
    fn drop(&mut self) {
        lock(self.inflight).remove(self.digest);
    }
}

/// A bounded on-disk cache of chart archives keyed by sha256, in front of a fetcher, with a
/// small in-memory cache of loaded charts (the [module docs](crate::charts) give the
/// guarantees).
pub struct CachedCharts<F: ArchiveFetcher> {
    disk: Arc<Disk>,
    fetcher: F,
    loaded: Mutex<Loaded>,
    inflight: Mutex<HashMap<ChartDigest, Flight>>,
}

impl<F: ArchiveFetcher> CachedCharts<F> {
    /// A cache in `dir` (created if missing) holding at most `max_bytes` of archives, filled
    /// from `fetcher`. Indexes the archives already there (blocking; call it at start-up).
    pub fn new(dir: PathBuf, max_bytes: u64, fetcher: F) -> Result<Self, ChartError> {
        Ok(Self {
            disk: Arc::new(Disk::open(dir, max_bytes)?),
            fetcher,
            loaded: Mutex::new(Loaded {
                capacity: DEFAULT_LOADED_CHARTS,
                entries: HashMap::new(),
                clock: 0,
            }),
            inflight: Mutex::new(HashMap::new()),
        })
    }

    /// Keeps at most `count` loaded charts in memory (default [`DEFAULT_LOADED_CHARTS`];
    /// 0 parses the archive on every request).
    pub fn with_loaded_charts(self, count: usize) -> Self {
        {
            let mut loaded = lock(&self.loaded);
            loaded.capacity = count;
            loaded.entries.clear();
        }
        self
    }

    /// The size in bytes of the archive of `digest`, when it is on disk.
    pub fn cached_size(&self, digest: &ChartDigest) -> Option<u64> {
        lock(&self.disk.index).entries.get(digest).map(|e| e.size)
    }

    /// The digests of the archives on disk, least recently used first.
    pub fn cached_digests(&self) -> Vec<ChartDigest> {
        lock(&self.disk.index).digests()
    }

    /// The total size of the archives on disk, in bytes.
    pub fn cached_bytes(&self) -> u64 {
        lock(&self.disk.index).total
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.disk.dir
    }

    /// The fetcher behind the cache.
    pub fn fetcher(&self) -> &F {
        &self.fetcher
    }

    /// The loaded chart whose archive has `digest`: from memory, else from disk, else
    /// fetched (and kept on disk).
    pub async fn get(&self, digest: &ChartDigest) -> Result<Arc<Chart>, ChartError> {
        loop {
            if let Some(chart) = self.loaded_hit(digest) {
                return Ok(chart);
            }
            let role = {
                let mut inflight = lock(&self.inflight);
                match inflight.get(digest) {
                    Some(rx) => Role::Follow(rx.clone()),
                    None => {
                        let (tx, rx) = watch::channel(None);
                        inflight.insert(digest.clone(), rx);
                        Role::Lead(tx)
                    }
                }
            };
            match role {
                Role::Lead(tx) => return self.lead(digest, tx).await,
                Role::Follow(mut rx) => {
                    if let Ok(result) = rx.wait_for(Option::is_some).await {
                        return result
                            .as_ref()
                            .expect("waited until the result was set")
                            .clone();
                    }
                    // The request doing the work was cancelled: take over.
                }
            }
        }
    }

    /// Puts an archive in the cache with the chart loaded from it (plan-file mode imports
    /// its charts this way, so an agent restarted with no input finds them); the chart is
    /// kept in memory too. Returns the archive's digest.
    pub async fn insert(&self, bytes: Vec<u8>, chart: Chart) -> Result<ChartDigest, ChartError> {
        let digest = ChartDigest::of_bytes(&bytes);
        let disk = self.disk.clone();
        let d = digest.clone();
        blocking(&digest, move || {
            if bytes.len() as u64 > disk.max_bytes {
                return Ok(());
            }
            disk.write(&d, &bytes)
                .map_err(|e| ChartError::io(disk.path(&d), e))
        })
        .await?;
        lock(&self.loaded).insert(digest.clone(), Arc::new(chart));
        Ok(digest)
    }

    /// Puts an archive the hub sent along with a plan in the cache, once it is checked to
    /// be the archive of `digest` and to load as a chart (kept in memory too: its plan is
    /// reconciled next). An archive already on disk is left as it is.
    pub async fn put(&self, digest: &ChartDigest, bytes: Vec<u8>) -> Result<(), ChartError> {
        if lock(&self.disk.index).contains(digest) {
            return Ok(());
        }
        let disk = self.disk.clone();
        let d = digest.clone();
        let chart = blocking(digest, move || {
            let chart = verify_and_load(&d, &bytes)?;
            if bytes.len() as u64 <= disk.max_bytes {
                disk.write(&d, &bytes)
                    .map_err(|e| ChartError::io(disk.path(&d), e))?;
            }
            Ok(chart)
        })
        .await?;
        lock(&self.loaded).insert(digest.clone(), Arc::new(chart));
        tracing::debug!(digest = %digest, "chart received with its plan");
        Ok(())
    }

    /// A hit in the loaded charts (which counts as a use of the archive on disk).
    fn loaded_hit(&self, digest: &ChartDigest) -> Option<Arc<Chart>> {
        let chart = lock(&self.loaded).get(digest)?;
        lock(&self.disk.index).touch(digest);
        Some(chart)
    }

    /// Does the work for `digest` and hands the result to the requests waiting on `tx`.
    async fn lead(
        &self,
        digest: &ChartDigest,
        tx: watch::Sender<Option<Result<Arc<Chart>, ChartError>>>,
    ) -> Result<Arc<Chart>, ChartError> {
        let _guard = FlightGuard {
            inflight: &self.inflight,
            digest,
        };
        // A request that finished between our miss and our taking the lead put its chart
        // in memory before leaving.
        let result = match self.loaded_hit(digest) {
            Some(chart) => Ok(chart),
            None => self.resolve(digest).await,
        };
        if let Ok(chart) = &result {
            lock(&self.loaded).insert(digest.clone(), chart.clone());
        }
        tx.send_replace(Some(result.clone()));
        result
    }

    /// Reads `digest` from disk, or fetches it.
    async fn resolve(&self, digest: &ChartDigest) -> Result<Arc<Chart>, ChartError> {
        let on_disk = lock(&self.disk.index).contains(digest);
        if on_disk {
            let disk = self.disk.clone();
            let d = digest.clone();
            if let Some(chart) = blocking(digest, move || disk.read(&d)).await? {
                lock(&self.disk.index).touch(digest);
                tracing::debug!(digest = %digest, "chart loaded from the cache");
                return Ok(Arc::new(chart));
            }
        }
        let bytes = self.fetcher.fetch(digest).await?;
        let disk = self.disk.clone();
        let d = digest.clone();
        let chart = blocking(digest, move || {
            let chart = verify_and_load(&d, &bytes)?;
            if bytes.len() as u64 > disk.max_bytes {
                tracing::info!(
                    digest = %d,
                    size = bytes.len(),
                    max_bytes = disk.max_bytes,
                    "chart archive larger than the cache; served, not kept"
                );
            } else if let Err(e) = disk.write(&d, &bytes) {
                tracing::warn!(
                    digest = %d,
                    dir = %disk.dir.display(),
                    error = %e,
                    "cannot write a chart archive to the cache; served, not kept"
                );
            }
            Ok(chart)
        })
        .await?;
        tracing::debug!(digest = %digest, "chart fetched");
        Ok(Arc::new(chart))
    }
}

impl<F: ArchiveFetcher> fmt::Debug for CachedCharts<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (archives, bytes) = {
            let index = lock(&self.disk.index);
            (index.entries.len(), index.total)
        };
        f.debug_struct("CachedCharts")
            .field("dir", &self.disk.dir)
            .field("max_bytes", &self.disk.max_bytes)
            .field("archives", &archives)
            .field("bytes", &bytes)
            .field("loaded", &lock(&self.loaded).entries.len())
            .field("fetcher", &self.fetcher)
            .finish()
    }
}

impl<F: ArchiveFetcher> ChartSource for CachedCharts<F> {
    fn chart<'a>(
        &'a self,
        artifact: &'a ChartArtifact,
    ) -> BoxFuture<'a, Result<Arc<Chart>, ChartError>> {
        Box::pin(self.get(&artifact.digest))
    }
}

/// No source behind the cache: an archive that is not cached is not found (plan-file
/// mode, and `flotilla-agent run` without a hub).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFetcher;

impl ArchiveFetcher for NoFetcher {
    fn fetch<'a>(&'a self, digest: &'a ChartDigest) -> BoxFuture<'a, Result<Vec<u8>, ChartError>> {
        Box::pin(async move {
            Err(ChartError::NotFound {
                digest: digest.clone(),
            })
        })
    }
}

// ---------------------------------------------------------------------------------------
// DirectoryArchives

/// What a file hashed to, with the size and mtime it had then.
type HashMemo = HashMap<PathBuf, (u64, Option<SystemTime>, ChartDigest)>;

/// A fetcher over a directory of `*.tgz` archives (for tests, and for an operator seeding
/// charts): finds the archive whose sha256 matches, whatever its name (`<hex>.tgz` is
/// tried first). Hashes are remembered per file while its size and mtime do not change.
#[derive(Debug)]
pub struct DirectoryArchives {
    dir: PathBuf,
    hashes: Arc<Mutex<HashMemo>>,
}

impl DirectoryArchives {
    /// Archives in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            hashes: Arc::default(),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Finds the archive of `digest` in `dir`. Blocking.
fn find_archive(
    dir: &Path,
    digest: &ChartDigest,
    hashes: &Mutex<HashMemo>,
) -> Result<Vec<u8>, ChartError> {
    let preferred = dir.join(format!("{}.tgz", digest.hex()));
    let mut candidates = vec![preferred.clone()];
    let mut others = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| ChartError::io(dir, e))? {
        let path = entry.map_err(|e| ChartError::io(dir, e))?.path();
        if path != preferred && path.extension().is_some_and(|e| e == "tgz") {
            others.push(path);
        }
    }
    others.sort();
    candidates.extend(others);
    for path in candidates {
        let md = match std::fs::metadata(&path) {
            Ok(md) if md.is_file() => md,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(ChartError::io(path, e)),
        };
        let stamp = (md.len(), md.modified().ok());
        let known = lock(hashes)
            .get(&path)
            .filter(|(len, mtime, _)| (*len, *mtime) == stamp)
            .map(|(_, _, d)| d.clone());
        if known.as_ref().is_some_and(|d| d != digest) {
            continue;
        }
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(ChartError::io(path, e)),
        };
        let actual = ChartDigest::of_bytes(&bytes);
        let found = actual == *digest;
        lock(hashes).insert(path, (stamp.0, stamp.1, actual));
        if found {
            return Ok(bytes);
        }
    }
    Err(ChartError::NotFound {
        digest: digest.clone(),
    })
}

impl ArchiveFetcher for DirectoryArchives {
    fn fetch<'a>(&'a self, digest: &'a ChartDigest) -> BoxFuture<'a, Result<Vec<u8>, ChartError>> {
        let dir = self.dir.clone();
        let hashes = self.hashes.clone();
        let d = digest.clone();
        Box::pin(blocking(digest, move || find_archive(&dir, &d, &hashes)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use super::*;

    /// The `hello` test chart packed as Helm packs it (`hello/` prefix), at `version`.
    fn hello_archive(version: &str) -> Vec<u8> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/charts/hello");
        let mut files = Vec::new();
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    files.push(path);
                }
            }
        }
        files.sort();
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        let mut tar = tar::Builder::new(gz);
        for path in files {
            let rel = path
                .strip_prefix(&root)
                .unwrap()
                .to_str()
                .unwrap()
                .to_owned();
            let mut data = std::fs::read(&path).unwrap();
            if rel == "Chart.yaml" {
                let text = String::from_utf8(data).unwrap();
                assert!(text.contains("\nversion: 0.1.0\n"), "{text}");
                data = text
                    .replace("\nversion: 0.1.0\n", &format!("\nversion: {version}\n"))
                    .into_bytes();
            }
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            header.set_mtime(0);
            header.set_cksum();
            tar.append_data(&mut header, format!("hello/{rel}"), data.as_slice())
                .unwrap();
        }
        tar.into_inner().unwrap().finish().unwrap()
    }

    /// Serves archives from memory, counting calls; `delay` makes each fetch take a while.
    #[derive(Debug, Default)]
    struct Served {
        archives: HashMap<ChartDigest, Vec<u8>>,
        calls: AtomicUsize,
        delay: Duration,
    }

    impl Served {
        fn of(archives: &[&[u8]]) -> Self {
            Self {
                archives: archives
                    .iter()
                    .map(|a| (ChartDigest::of_bytes(a), a.to_vec()))
                    .collect(),
                ..Self::default()
            }
        }

        fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }
    }

    impl ArchiveFetcher for Served {
        fn fetch<'a>(
            &'a self,
            digest: &'a ChartDigest,
        ) -> BoxFuture<'a, Result<Vec<u8>, ChartError>> {
            Box::pin(async move {
                self.calls.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(self.delay).await;
                self.archives
                    .get(digest)
                    .cloned()
                    .ok_or_else(|| ChartError::NotFound {
                        digest: digest.clone(),
                    })
            })
        }
    }

    fn artifact(digest: &ChartDigest) -> ChartArtifact {
        ChartArtifact {
            name: "hello".into(),
            version: "0.1.0".into(),
            app_version: None,
            digest: digest.clone(),
            oci_digest: None,
        }
    }

    /// The names in `dir`, sorted.
    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    fn file_name(digest: &ChartDigest) -> String {
        format!("{}.tgz", digest.hex())
    }

    #[tokio::test]
    async fn a_fetched_archive_is_kept_on_disk_and_fetched_once_for_two_requests() {
        let dir = tempfile::tempdir().unwrap();
        let a = hello_archive("0.1.0");
        let da = ChartDigest::of_bytes(&a);
        let cache =
            CachedCharts::new(dir.path().join("cache"), 1 << 20, Served::of(&[&a])).unwrap();

        let first = cache.chart(&artifact(&da)).await.unwrap();
        let second = cache.chart(&artifact(&da)).await.unwrap();

        assert_eq!(first.metadata.name, "hello");
        assert_eq!(first.metadata.version, "0.1.0");
        assert!(Arc::ptr_eq(&first, &second), "the second comes from memory");
        assert_eq!(cache.fetcher().calls(), 1);
        assert_eq!(cache.cached_digests(), vec![da.clone()]);
        assert_eq!(cache.cached_bytes(), a.len() as u64);
        assert_eq!(names(cache.dir()), vec![file_name(&da)]);
        assert_eq!(std::fs::read(cache.dir().join(file_name(&da))).unwrap(), a);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_requests_for_one_digest_fetch_it_once() {
        let dir = tempfile::tempdir().unwrap();
        let a = hello_archive("0.1.0");
        let da = ChartDigest::of_bytes(&a);
        let mut served = Served::of(&[&a]);
        served.delay = Duration::from_millis(200);
        // No loaded charts in memory: only the single flight can spare the second fetch.
        let cache = Arc::new(
            CachedCharts::new(dir.path().to_owned(), 1 << 20, served)
                .unwrap()
                .with_loaded_charts(0),
        );

        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let cache = cache.clone();
                let da = da.clone();
                tokio::spawn(async move { cache.get(&da).await })
            })
            .collect();
        let mut charts = Vec::new();
        for t in tasks {
            charts.push(t.await.unwrap().unwrap());
        }

        assert_eq!(cache.fetcher().calls(), 1);
        assert!(charts.iter().all(|c| Arc::ptr_eq(c, &charts[0])));
        assert_eq!(cache.cached_digests(), vec![da]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiting_request_takes_over_when_the_fetching_one_is_cancelled() {
        let dir = tempfile::tempdir().unwrap();
        let a = hello_archive("0.1.0");
        let da = ChartDigest::of_bytes(&a);
        let mut served = Served::of(&[&a]);
        served.delay = Duration::from_millis(300);
        let cache = Arc::new(CachedCharts::new(dir.path().to_owned(), 1 << 20, served).unwrap());

        let spawn = |cache: Arc<CachedCharts<Served>>, da: ChartDigest| {
            tokio::spawn(async move { cache.get(&da).await })
        };
        let leader = spawn(cache.clone(), da.clone());
        tokio::time::sleep(Duration::from_millis(50)).await;
        let follower = spawn(cache.clone(), da.clone());
        tokio::time::sleep(Duration::from_millis(50)).await;
        leader.abort();

        let chart = follower.await.unwrap().unwrap();
        assert_eq!(chart.metadata.name, "hello");
        assert_eq!(cache.fetcher().calls(), 2, "the follower fetched it again");
        assert!(lock(&cache.inflight).is_empty());
    }

    #[tokio::test]
    async fn a_corrupted_cached_archive_is_removed_and_fetched_again() {
        let dir = tempfile::tempdir().unwrap();
        let a = hello_archive("0.1.0");
        let da = ChartDigest::of_bytes(&a);
        let cache = CachedCharts::new(dir.path().to_owned(), 1 << 20, Served::of(&[&a]))
            .unwrap()
            .with_loaded_charts(0);
        cache.get(&da).await.unwrap();
        let path = dir.path().join(file_name(&da));

        let mut flipped = a.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0xff;
        let damaged: [&[u8]; 3] = [&flipped, &a[..a.len() / 2], b""];
        for (i, bad) in damaged.into_iter().enumerate() {
            std::fs::write(&path, bad).unwrap();
            let chart = cache.get(&da).await.unwrap();
            assert_eq!(chart.metadata.name, "hello");
            assert_eq!(cache.fetcher().calls(), i + 2, "fetched again");
            assert_eq!(
                std::fs::read(&path).unwrap(),
                a,
                "the good archive replaced it"
            );
            assert_eq!(cache.cached_bytes(), a.len() as u64);
        }

        // Damaged while no process ran: found by a new cache on the same directory.
        std::fs::write(&path, &flipped).unwrap();
        let restarted =
            CachedCharts::new(dir.path().to_owned(), 1 << 20, Served::of(&[&a])).unwrap();
        restarted.get(&da).await.unwrap();
        assert_eq!(restarted.fetcher().calls(), 1);
        assert_eq!(std::fs::read(&path).unwrap(), a);
    }

    #[tokio::test]
    async fn a_cached_archive_deleted_behind_the_cache_is_fetched_again() {
        let dir = tempfile::tempdir().unwrap();
        let a = hello_archive("0.1.0");
        let da = ChartDigest::of_bytes(&a);
        let cache = CachedCharts::new(dir.path().to_owned(), 1 << 20, Served::of(&[&a]))
            .unwrap()
            .with_loaded_charts(0);
        cache.get(&da).await.unwrap();
        std::fs::remove_file(dir.path().join(file_name(&da))).unwrap();

        cache.get(&da).await.unwrap();
        assert_eq!(cache.fetcher().calls(), 2);
        assert_eq!(cache.cached_digests(), vec![da]);
    }

    #[tokio::test]
    async fn a_fetcher_returning_wrong_bytes_gives_digest_mismatch_and_nothing_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let a = hello_archive("0.1.0");
        let b = hello_archive("0.2.0");
        let (da, db) = (ChartDigest::of_bytes(&a), ChartDigest::of_bytes(&b));
        let mut served = Served::default();
        served.archives.insert(da.clone(), b.clone());
        let cache = CachedCharts::new(dir.path().to_owned(), 1 << 20, served).unwrap();

        let err = cache.get(&da).await.unwrap_err();
        match &err {
            ChartError::DigestMismatch { expected, actual } => {
                assert_eq!(expected, &da);
                assert_eq!(actual, &db);
            }
            other => panic!("expected a digest mismatch, got {other:?}"),
        }
        assert_eq!(err.kind(), "digest_mismatch");
        assert!(
            err.is_transient(),
            "the next fetch may bring the right bytes"
        );
        assert!(cache.cached_digests().is_empty());
        assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
    }

    #[tokio::test]
    async fn an_archive_put_by_the_session_is_checked_kept_and_served_without_a_fetch() {
        let dir = tempfile::tempdir().unwrap();
        let a = hello_archive("0.1.0");
        let b = hello_archive("0.2.0");
        let junk = b"not a chart".to_vec();
        let (da, db, dj) = (
            ChartDigest::of_bytes(&a),
            ChartDigest::of_bytes(&b),
            ChartDigest::of_bytes(&junk),
        );
        let cache = CachedCharts::new(dir.path().to_owned(), 1 << 20, Served::default()).unwrap();

        // Bytes that are not the archive of the digest, or no chart: refused, not kept.
        let err = cache.put(&da, b.clone()).await.unwrap_err();
        assert!(
            matches!(&err, ChartError::DigestMismatch { expected, actual } if *expected == da && *actual == db),
            "{err:?}"
        );
        let err = cache.put(&dj, junk).await.unwrap_err();
        assert_eq!(err.kind(), "load");
        assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));

        cache.put(&da, a.clone()).await.unwrap();
        assert_eq!(cache.cached_digests(), vec![da.clone()]);
        assert_eq!(std::fs::read(dir.path().join(file_name(&da))).unwrap(), a);
        let chart = cache.get(&da).await.unwrap();
        assert_eq!(chart.metadata.version, "0.1.0");
        assert_eq!(cache.fetcher().calls(), 0, "served from what was put");
        // Put again: left as it is.
        cache.put(&da, a).await.unwrap();
        assert_eq!(cache.cached_digests(), vec![da]);
    }

    #[tokio::test]
    async fn an_archive_that_matches_its_digest_but_is_no_chart_is_a_load_error() {
        let dir = tempfile::tempdir().unwrap();
        let junk = b"not a chart".to_vec();
        let dj = ChartDigest::of_bytes(&junk);
        let cache =
            CachedCharts::new(dir.path().to_owned(), 1 << 20, Served::of(&[&junk])).unwrap();

        let err = cache.get(&dj).await.unwrap_err();
        assert!(
            matches!(&err, ChartError::Load { digest, .. } if *digest == dj),
            "{err:?}"
        );
        assert_eq!(err.kind(), "load");
        assert!(!err.is_transient());
        assert!(names(dir.path()).is_empty());
    }

    #[tokio::test]
    async fn eviction_keeps_the_total_under_the_bound_dropping_the_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let [a, b, c] = ["0.1.0", "0.2.0", "0.3.0"].map(hello_archive);
        let [da, db, dc] = [&a, &b, &c].map(|x| ChartDigest::of_bytes(x));
        let (la, lb, lc) = (a.len() as u64, b.len() as u64, c.len() as u64);
        // A and B fit, A and C fit, all three do not.
        let max = (la + lb).max(la + lc);
        let cache =
            CachedCharts::new(dir.path().to_owned(), max, Served::of(&[&a, &b, &c])).unwrap();

        cache.get(&da).await.unwrap();
        cache.get(&db).await.unwrap();
        assert_eq!(cache.cached_digests(), vec![da.clone(), db.clone()]);
        // A is used again (from memory): B is now the least recently used.
        cache.get(&da).await.unwrap();
        assert_eq!(cache.fetcher().calls(), 2);
        cache.get(&dc).await.unwrap();

        assert_eq!(cache.cached_digests(), vec![da.clone(), dc.clone()]);
        assert_eq!(cache.cached_bytes(), la + lc);
        assert!(cache.cached_bytes() <= max);
        let mut want = vec![file_name(&da), file_name(&dc)];
        want.sort();
        assert_eq!(names(dir.path()), want, "B's file is gone");

        // An evicted chart still loaded in memory is served from there; once out of
        // memory too, it is fetched again.
        cache.get(&db).await.unwrap();
        assert_eq!(cache.fetcher().calls(), 3);
        let no_memory = cache.with_loaded_charts(0);
        no_memory.get(&db).await.unwrap();
        assert_eq!(no_memory.fetcher().calls(), 4);
        assert!(no_memory.cached_bytes() <= max);
        assert_eq!(no_memory.cached_digests().last(), Some(&db));
    }

    #[tokio::test]
    async fn an_archive_larger_than_the_bound_is_served_but_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let a = hello_archive("0.1.0");
        let da = ChartDigest::of_bytes(&a);
        let cache = CachedCharts::new(dir.path().to_owned(), a.len() as u64 - 1, Served::of(&[&a]))
            .unwrap()
            .with_loaded_charts(0);

        assert_eq!(cache.get(&da).await.unwrap().metadata.name, "hello");
        assert!(cache.cached_digests().is_empty());
        assert!(names(dir.path()).is_empty());
        cache.get(&da).await.unwrap();
        assert_eq!(cache.fetcher().calls(), 2);
    }

    #[tokio::test]
    async fn the_cache_survives_a_new_cached_charts_on_the_same_directory() {
        let dir = tempfile::tempdir().unwrap();
        let [a, b] = ["0.1.0", "0.2.0"].map(hello_archive);
        let [da, db] = [&a, &b].map(|x| ChartDigest::of_bytes(x));
        {
            let cache =
                CachedCharts::new(dir.path().to_owned(), 1 << 20, Served::of(&[&a, &b])).unwrap();
            cache.get(&da).await.unwrap();
            cache.get(&db).await.unwrap();
        }
        // A stray temporary file, as a crash mid-write leaves, and a file the cache did not write.
        std::fs::write(dir.path().join(".tmp-crashed"), b"partial").unwrap();
        std::fs::write(dir.path().join("README"), b"operator notes").unwrap();

        let restarted =
            CachedCharts::new(dir.path().to_owned(), 1 << 20, Served::default()).unwrap();
        let mut cached = restarted.cached_digests();
        cached.sort();
        let mut want = vec![da.clone(), db.clone()];
        want.sort();
        assert_eq!(cached, want);
        assert_eq!(restarted.cached_bytes(), (a.len() + b.len()) as u64);
        assert_eq!(restarted.get(&db).await.unwrap().metadata.version, "0.2.0");
        assert_eq!(restarted.get(&da).await.unwrap().metadata.version, "0.1.0");
        assert_eq!(restarted.fetcher().calls(), 0);
        let mut files = vec![file_name(&da), file_name(&db), "README".to_owned()];
        files.sort();
        assert_eq!(names(dir.path()), files, "the temporary file is removed");
    }

    #[tokio::test]
    async fn a_new_cache_evicts_by_last_use_down_to_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let [a, b] = ["0.1.0", "0.2.0"].map(hello_archive);
        let [da, db] = [&a, &b].map(|x| ChartDigest::of_bytes(x));
        {
            let cache = CachedCharts::new(dir.path().to_owned(), 1 << 20, Served::of(&[&a, &b]))
                .unwrap()
                .with_loaded_charts(0);
            cache.get(&da).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            cache.get(&db).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            // Read from disk: A's mtime says it was used after B was written.
            cache.get(&da).await.unwrap();
            assert_eq!(cache.fetcher().calls(), 2);
        }

        let max = a.len().max(b.len()) as u64;
        let smaller = CachedCharts::new(dir.path().to_owned(), max, Served::default()).unwrap();
        assert_eq!(smaller.cached_digests(), vec![da.clone()]);
        assert_eq!(names(dir.path()), vec![file_name(&da)]);
    }

    #[tokio::test]
    async fn the_cache_directory_is_created_when_missing() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("var/lib/flotilla/charts");
        let cache = CachedCharts::new(nested.clone(), 1 << 20, Served::default()).unwrap();
        assert!(nested.is_dir());
        assert!(cache.cached_digests().is_empty());

        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        let err = CachedCharts::new(file.join("charts"), 1 << 20, Served::default()).unwrap_err();
        assert_eq!(err.kind(), "io");
        assert!(err.to_string().contains("file/charts"), "{err}");
    }

    #[tokio::test]
    async fn an_unknown_digest_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CachedCharts::new(dir.path().to_owned(), 1 << 20, Served::default()).unwrap();
        let d = ChartDigest::of_bytes(b"absent");
        let err = cache.get(&d).await.unwrap_err();
        assert!(
            matches!(&err, ChartError::NotFound { digest } if *digest == d),
            "{err:?}"
        );
        assert!(!err.is_transient());
    }

    #[tokio::test]
    async fn local_charts_serve_registered_charts_and_not_found_for_unknown_digests() {
        let charts = LocalCharts::new();
        let a = flotilla_chart::load_archive(&hello_archive("0.1.0")).unwrap();
        let da = ChartDigest::of_bytes(b"the plan file's chart");
        charts.insert(da.clone(), a);
        let source: Arc<dyn ChartSource> = Arc::new(charts);

        assert_eq!(
            source.chart(&artifact(&da)).await.unwrap().metadata.name,
            "hello"
        );
        let unknown = ChartDigest::of_bytes(b"unknown");
        let err = source.chart(&artifact(&unknown)).await.unwrap_err();
        assert!(
            matches!(&err, ChartError::NotFound { digest } if *digest == unknown),
            "{err:?}"
        );
        assert_eq!(err.kind(), "not_found");
        assert_eq!(err.to_string(), format!("chart {unknown}: not found"));
    }

    #[test]
    fn local_charts_forget_removed_charts() {
        let charts = LocalCharts::new();
        let d = ChartDigest::of_bytes(b"x");
        charts.insert(
            d.clone(),
            flotilla_chart::load_archive(&hello_archive("0.1.0")).unwrap(),
        );
        assert!(charts.remove(&d));
        assert!(!charts.remove(&d));
        assert!(charts.get(&d).is_err());
    }

    #[tokio::test]
    async fn directory_archives_find_an_archive_by_its_sha256_whatever_its_name() {
        let seed = tempfile::tempdir().unwrap();
        let [a, b] = ["0.1.0", "0.2.0"].map(hello_archive);
        let [da, db] = [&a, &b].map(|x| ChartDigest::of_bytes(x));
        std::fs::write(seed.path().join("hello-0.1.0.tgz"), &a).unwrap();
        std::fs::write(seed.path().join("hello-0.2.0.tgz"), &b).unwrap();
        std::fs::write(seed.path().join("notes.txt"), &b).unwrap();
        let archives = DirectoryArchives::new(seed.path());

        assert_eq!(archives.fetch(&db).await.unwrap(), b);
        assert_eq!(archives.fetch(&da).await.unwrap(), a);
        let unknown = ChartDigest::of_bytes(b"unknown");
        assert!(matches!(
            archives.fetch(&unknown).await,
            Err(ChartError::NotFound { .. })
        ));
        // Replaced in place: the remembered hash is not trusted once the file changed.
        std::fs::write(seed.path().join("hello-0.1.0.tgz"), &b).unwrap();
        std::fs::remove_file(seed.path().join("hello-0.2.0.tgz")).unwrap();
        assert_eq!(archives.fetch(&db).await.unwrap(), b);

        // Behind a cache.
        let cache_dir = tempfile::tempdir().unwrap();
        let cache = CachedCharts::new(cache_dir.path().to_owned(), 1 << 20, archives).unwrap();
        assert_eq!(cache.get(&db).await.unwrap().metadata.version, "0.2.0");
        assert_eq!(cache.cached_digests(), vec![db]);
        assert!(matches!(
            cache.get(&da).await,
            Err(ChartError::NotFound { .. })
        ));
    }

    #[test]
    fn chart_errors_have_bounded_kinds_and_say_whether_to_retry() {
        let d = ChartDigest::of_bytes(b"x");
        let cases = [
            (
                ChartError::NotFound { digest: d.clone() },
                "not_found",
                false,
            ),
            (
                ChartError::DigestMismatch {
                    expected: d.clone(),
                    actual: ChartDigest::of_bytes(b"y"),
                },
                "digest_mismatch",
                true,
            ),
            (
                ChartError::Load {
                    digest: d.clone(),
                    source: Arc::new(LoadError::EmptyArchive),
                },
                "load",
                false,
            ),
            (
                ChartError::io("/cache", io::Error::other("disk full")),
                "io",
                true,
            ),
            (
                ChartError::Fetch {
                    digest: d.clone(),
                    message: "hub unreachable".into(),
                },
                "fetch",
                true,
            ),
            (
                ChartError::Internal {
                    digest: d.clone(),
                    message: "panicked".into(),
                },
                "internal",
                false,
            ),
        ];
        for (err, kind, transient) in cases {
            assert_eq!(err.kind(), kind, "{err}");
            assert_eq!(err.is_transient(), transient, "{err}");
        }
    }
}

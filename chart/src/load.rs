//! Loading charts from a directory, a `.tgz` archive or in-memory files, following Helm's
//! `pkg/chart/v2/loader` and `pkg/chart/loader/archive`.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::chart::{Chart, File};
use crate::ignore::{IgnoreError, Rules};
use crate::metadata::{DecodeError, Lock, Metadata, ValidationError};
use crate::time::GoTime;
use crate::values::{ValuesError, load_values_bytes};

/// Largest decompressed archive Helm accepts (100 MiB).
pub const MAX_DECOMPRESSED_CHART_SIZE: u64 = 100 * 1024 * 1024;
/// Largest single file Helm accepts (5 MiB).
pub const MAX_DECOMPRESSED_FILE_SIZE: u64 = 5 * 1024 * 1024;

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// The decompression budget of one chart load: every byte gunzipped counts against
/// [`MAX_DECOMPRESSED_CHART_SIZE`], the tar headers, GNU long-name and PAX extension
/// headers and padding included, and so does every archive under `charts/`, however deep.
/// Helm counts only file contents, per archive; an extension header that declares a
/// gigabyte (which the tar reader buffers whole) or a subchart archive that gunzips to its
/// own 100 MiB would escape that.
#[derive(Debug)]
struct Budget {
    remaining: std::cell::Cell<u64>,
    exhausted: std::cell::Cell<bool>,
}

impl Budget {
    fn new() -> Self {
        Budget {
            remaining: std::cell::Cell::new(MAX_DECOMPRESSED_CHART_SIZE),
            exhausted: std::cell::Cell::new(false),
        }
    }

    /// `e` as a load error: [`LoadError::ArchiveTooLarge`] when the budget ran out.
    fn error(&self, e: std::io::Error) -> LoadError {
        if self.exhausted.get() {
            LoadError::ArchiveTooLarge
        } else {
            LoadError::Archive(e.to_string())
        }
    }
}

/// A reader spending a [`Budget`]: past it, an error.
struct Budgeted<'a, R> {
    inner: R,
    budget: &'a Budget,
}

impl<R: Read> Read for Budgeted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.budget.remaining.get();
        // One byte past the budget shows it is exceeded.
        let want = buf
            .len()
            .min(usize::try_from(left.saturating_add(1)).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        if n as u64 > left {
            self.budget.remaining.set(0);
            self.budget.exhausted.set(true);
            return Err(std::io::Error::other("decompressed chart is too large"));
        }
        self.budget.remaining.set(left - n as u64);
        Ok(n)
    }
}

/// A chart loading error, in Helm's words.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// IO on the chart path.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Reading one chart file failed.
    #[error("error reading {path}: {source}")]
    Read {
        /// Relative path.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// `.helmignore` is malformed.
    #[error("{path}: {source}")]
    Ignore {
        /// The `.helmignore` path.
        path: String,
        /// What is wrong.
        source: IgnoreError,
    },
    /// A special file (device, socket, fifo).
    #[error("cannot load irregular file {0} as it has file mode type bits set")]
    Irregular(String),
    /// A file over 5 MiB in a directory.
    #[error("chart file {} is larger than the maximum file size {}", flotilla_gotmpl::gofmt::quote(.0), MAX_DECOMPRESSED_FILE_SIZE)]
    FileTooLarge(String),
    /// A file over 5 MiB in an archive.
    #[error("decompressed chart file {} is larger than the maximum file size {}", flotilla_gotmpl::gofmt::quote(.0), MAX_DECOMPRESSED_FILE_SIZE)]
    ArchiveFileTooLarge(String),
    /// The archive decompresses to more than 100 MiB.
    #[error(
        "decompressed chart is larger than the maximum size {}",
        MAX_DECOMPRESSED_CHART_SIZE
    )]
    ArchiveTooLarge,
    /// Not gzip.
    #[error("file '{name}' does not appear to be a gzipped archive; got '{content_type}'")]
    NotGzip {
        /// The file.
        name: String,
        /// What it looks like.
        content_type: &'static str,
    },
    /// A YAML file given where an archive was expected.
    #[error("file '{0}' seems to be a YAML file, but expected a gzipped archive")]
    YamlNotArchive(String),
    /// gzip or tar stream errors.
    #[error("{0}")]
    Archive(String),
    /// An absolute path in an archive.
    #[error("chart illegally contains absolute paths")]
    AbsolutePath,
    /// An entry outside the chart directory.
    #[error("chart illegally contains content outside the base directory: {}", flotilla_gotmpl::gofmt::quote(.0))]
    OutsideBase(String),
    /// `..` in an archive path.
    #[error("chart illegally references parent directory")]
    ParentDirectory,
    /// `C:/`-style path.
    #[error("chart contains illegally named files")]
    IllegalName,
    /// `Chart.yaml` at the archive root.
    #[error("chart yaml not in base directory")]
    ChartYamlNotInBase,
    /// Empty archive.
    #[error("no files in chart archive")]
    EmptyArchive,
    /// `Chart.yaml` absent.
    #[error("Chart.yaml file is missing")]
    MissingChartYaml,
    /// A chart file did not decode.
    #[error("cannot load {file}: {source}")]
    Decode {
        /// `Chart.yaml`, `Chart.lock`, `requirements.yaml`, `requirements.lock`.
        file: &'static str,
        /// The decode error.
        source: DecodeError,
    },
    /// `values.yaml` did not parse.
    #[error("cannot load values.yaml: {0}")]
    Values(ValuesError),
    /// Metadata validation.
    #[error(transparent)]
    Validation(#[from] ValidationError),
    /// A subchart failed to load.
    #[error("error unpacking subchart {name} in {parent}: {source}")]
    Subchart {
        /// Directory or archive name under charts/.
        name: String,
        /// Parent chart name.
        parent: String,
        /// Why.
        source: Box<LoadError>,
    },
    /// A subchart archive whose entry is not directly in charts/.
    #[error("error unpacking subchart tar in {parent}: expected {expected}, got {got}")]
    SubchartTar {
        /// Parent chart name.
        parent: String,
        /// Expected name.
        expected: String,
        /// Found name.
        got: String,
    },
    /// A directory given where a file was expected.
    #[error("cannot load a directory")]
    IsDirectory,
    /// The directory has no readable Chart.yaml.
    #[error("unable to detect chart at {path}: {message}")]
    Detect {
        /// Chart.yaml path.
        path: String,
        /// Go's error text.
        message: String,
    },
    /// `apiVersion` other than v1/v2.
    #[error("unsupported chart version")]
    UnsupportedVersion,
    /// Archive without Chart.yaml (CLI form).
    #[error("unable to detect chart version, no Chart.yaml found")]
    NoChartYaml,
    /// Any archive error (CLI form: Helm hides the detail).
    #[error("unable to load chart archive")]
    UnableToLoadArchive,
    /// Not a gzip stream (CLI form).
    #[error("file '{name}' does not appear to be a valid chart file (details: {details})")]
    InvalidChartFile {
        /// The file.
        name: String,
        /// gzip's error.
        details: String,
    },
}

/// A file read from a chart before classification (`archive.BufferedFile`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferedFile {
    /// `/`-separated path relative to the chart root.
    pub name: String,
    /// Contents (BOM already stripped).
    pub data: Vec<u8>,
    /// Modification time.
    pub mod_time: Option<GoTime>,
}

/// `pkg/chart/loader.Load`, what the Helm CLI calls: a directory or an archive file,
/// dispatched on `Chart.yaml`'s `apiVersion` (`v1`, `v2` or none load as chart v2; anything
/// else, including the experimental `v3`, is `unsupported chart version`). Archive errors
/// are reported as Helm's CLI does (`unable to load chart archive`); [`load_dir`],
/// [`load_file`] and [`load_archive`] keep the detailed v2 loader errors.
pub fn load(path: &Path) -> Result<Chart, LoadError> {
    load_observed(path, &mut |_, _| {})
}

/// [`load`], calling `on_read` as soon as a directory chart's files are read, before they
/// are decoded, with the files (paths relative to the chart root, a subchart's under
/// `charts/<directory>/`) and the name its `Chart.yaml` gives: the caller can start work on
/// them (`flotilla template` parses the templates ahead) while loading goes on. Not called
/// for archives, nor when the walk failed.
pub fn load_observed(
    path: &Path,
    on_read: &mut dyn FnMut(&[File], &str),
) -> Result<Chart, LoadError> {
    let md = std::fs::metadata(path).map_err(|e| LoadError::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    if md.is_dir() {
        let name = std::path::absolute(path)
            .unwrap_or_else(|_| path.to_path_buf())
            .join("Chart.yaml");
        let data = std::fs::read(&name).map_err(|e| LoadError::Detect {
            path: name.display().to_string(),
            message: go_io_error("open", &name, &e),
        })?;
        let metadata = check_api_version(&data)?;
        return load_dir_detected(path, Some(Detected { data, metadata }), on_read);
    }
    let name = path.display().to_string();
    let data = std::fs::read(path).map_err(|e| LoadError::Io {
        path: name.clone(),
        source: e,
    })?;
    ensure_archive(&name, &data)?;
    let budget = Budget::new();
    let files = load_archive_files_within(&data, &budget).map_err(|e| match e {
        LoadError::Archive(m) if m == "gzip: invalid header" => LoadError::InvalidChartFile {
            name: name.clone(),
            details: m,
        },
        _ => LoadError::UnableToLoadArchive,
    })?;
    let chart_yaml = files
        .iter()
        .find(|f| f.name == "Chart.yaml")
        .ok_or(LoadError::NoChartYaml)?;
    check_api_version(&chart_yaml.data)?;
    load_shared_files(files.into_iter().map(File::from).collect(), None, &budget)
}

/// The decoded `Chart.yaml`, when its `apiVersion` is one the v2 loader takes.
fn check_api_version(chart_yaml: &[u8]) -> Result<Metadata, LoadError> {
    let md = Metadata::from_yaml(chart_yaml).map_err(|e| LoadError::Decode {
        file: "Chart.yaml",
        source: e,
    })?;
    match md.api_version.as_str() {
        "" | "v1" | "v2" => Ok(md),
        _ => Err(LoadError::UnsupportedVersion),
    }
}

/// `Chart.yaml` as [`load`] read and decoded it to pick the loader: loading then reuses the
/// decoded metadata when the walk reads the same bytes.
struct Detected {
    data: Vec<u8>,
    metadata: Metadata,
}

/// An IO error as Go's `*PathError` prints it (`open /x: no such file or directory`).
fn go_io_error(op: &str, path: &Path, e: &std::io::Error) -> String {
    let what = match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".to_owned(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        std::io::ErrorKind::IsADirectory => "is a directory".to_owned(),
        _ => e.to_string(),
    };
    format!("{op} {}: {what}", path.display())
}

/// `loader.LoadDir`: walks the directory (following symlinks), applies `.helmignore` plus
/// the default `templates/.?*` rule, and loads the files.
pub fn load_dir(dir: &Path) -> Result<Chart, LoadError> {
    load_dir_detected(dir, None, &mut |_, _| {})
}

fn load_dir_detected(
    dir: &Path,
    detected: Option<Detected>,
    on_read: &mut dyn FnMut(&[File], &str),
) -> Result<Chart, LoadError> {
    let top = std::path::absolute(dir).map_err(|e| LoadError::Io {
        path: dir.display().to_string(),
        source: e,
    })?;
    let mut rules = Rules::empty();
    let ifile = top.join(".helmignore");
    if ifile.exists() {
        let data = std::fs::read(&ifile).map_err(|e| LoadError::Io {
            path: ifile.display().to_string(),
            source: e,
        })?;
        rules = Rules::parse(&data).map_err(|e| LoadError::Ignore {
            path: ifile.display().to_string(),
            source: e,
        })?;
    }
    rules.add_defaults();
    let mut found = Vec::new();
    // Files are read once the walk is over, so that all of their reads can be started at
    // once; a walk error after some files is reported only if those files could be read,
    // as the walk that reads as it goes (Helm's) would meet it.
    let walked = walk(dir, &top, "", &rules, &mut found, 0);
    let files = read_found(found)?;
    walked?;
    if let Some(d) = &detected {
        on_read(&files, &d.metadata.name);
    }
    load_shared_files(files, detected, &Budget::new())
}

/// A regular file the walk met, still to be read.
struct Found {
    /// `/`-separated path relative to the chart root.
    name: String,
    /// The path to open.
    path: PathBuf,
    /// Its absolute form, for messages.
    shown: PathBuf,
}

/// How many files [`read_found`] has open at once on one thread (fewer when the process runs
/// out of file descriptors first).
const READ_BATCH: usize = 256;

/// Batch size when two threads read: each takes the next batch left.
const SHARED_READ_BATCH: usize = 32;

/// Files from which a chart directory is read on two threads ([`read_on_two_threads`]);
/// `usize::MAX`: never.
static TWO_THREADS_FROM: AtomicUsize = AtomicUsize::new(usize::MAX);

/// For a process with a core to spare (`flotilla template`): chart directories of at least
/// `min_files` files are read on two threads (this one and one started for the read), the
/// same files with the same errors as on one.
pub fn read_on_two_threads(min_files: usize) {
    TWO_THREADS_FROM.store(min_files, Ordering::Relaxed);
}

/// Whether files read from a directory get their modification times (one `fstat` a file).
static MOD_TIMES: AtomicBool = AtomicBool::new(true);

/// For a process that never stores the chart it loads (`flotilla template`: the times are
/// only kept in release records): files read from chart directories get no modification
/// time ([`File::mod_time`] `None`), which saves a system call a file.
pub fn read_without_mod_times() {
    MOD_TIMES.store(false, Ordering::Relaxed);
}

/// Reads the files the walk found; the first failure in the walk's order is the error. Each
/// batch of them is opened, and the kernel told to read them all (`POSIX_FADV_WILLNEED`),
/// before the first is read: files not in the page cache then cost a few disk round trips
/// for the whole batch rather than one each (argo-cd's 190 files, dropped from the page
/// cache: 14-18 ms one after the other, 6 ms in batches of 64, 5 ms in one batch; as fast as
/// before when they are cached).
fn read_found(found: Vec<Found>) -> Result<Vec<File>, LoadError> {
    let two_threads = found.len() >= TWO_THREADS_FROM.load(Ordering::Relaxed).max(2);
    read_found_on(found, two_threads)
}

fn read_found_on(found: Vec<Found>, two_threads: bool) -> Result<Vec<File>, LoadError> {
    if !two_threads {
        return read_batches(&found, READ_BATCH, false)
            .into_iter()
            .collect();
    }
    let batches: Vec<&[Found]> = found.chunks(SHARED_READ_BATCH).collect();
    let next = AtomicUsize::new(0);
    // Batches after a failed one need not be read.
    let failed = AtomicUsize::new(usize::MAX);
    let work = || {
        let mut done = Vec::new();
        loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            if k >= batches.len() || k > failed.load(Ordering::Relaxed) {
                return done;
            }
            let read = read_batches(batches[k], SHARED_READ_BATCH, true);
            if read.last().is_some_and(Result::is_err) {
                failed.fetch_min(k, Ordering::Relaxed);
            }
            done.push((k, read));
        }
    };
    let mut slots: Vec<Option<Vec<Result<File, LoadError>>>> = Vec::new();
    slots.resize_with(batches.len(), || None);
    std::thread::scope(|s| {
        let builder = std::thread::Builder::new().name("chart-read".into());
        let helper = flotilla_sprig::cpu::spawn_scoped_elsewhere(builder, s, work);
        let mine = work();
        // A helper that could not start took nothing: this thread read everything.
        let theirs = match helper {
            Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
            Err(_) => Vec::new(),
        };
        for (k, read) in mine.into_iter().chain(theirs) {
            slots[k] = Some(read);
        }
    });
    let mut files = Vec::with_capacity(found.len());
    for (batch, read) in batches.iter().zip(slots).map_while(|(b, r)| Some((b, r?))) {
        let given_way = read.len() < batch.len() && !read.last().is_some_and(Result::is_err);
        let done = read.len();
        for f in read {
            files.push(f?);
        }
        if given_way {
            // The other thread held the descriptors: the rest of the batch, now alone.
            for f in read_batches(&batch[done..], READ_BATCH, false) {
                files.push(f?);
            }
        }
    }
    Ok(files)
}

/// Reads `found` in order, opening (and prefetching) up to `batch` files at a time; stops
/// after the first failure, which is the last result. Out of file descriptors with none of
/// its own open, it fails, or with `give_way` (another thread holds them) stops there
/// without an error: the results are then fewer than `found` and the last is not an error.
fn read_batches(found: &[Found], batch: usize, give_way: bool) -> Vec<Result<File, LoadError>> {
    let mut files = Vec::with_capacity(found.len());
    let mut found = found.iter().peekable();
    let mut open = Vec::new();
    let mut scratch = Vec::new();
    while found.peek().is_some() {
        while open.len() < batch
            && let Some(f) = found.next()
        {
            let opened = match std::fs::File::open(&f.path) {
                // Out of descriptors with some open: read those first, then this one.
                Err(e) if !open.is_empty() && out_of_descriptors(&e) => {
                    open.push((f, None));
                    break;
                }
                Err(e) if give_way && out_of_descriptors(&e) => return files,
                opened => opened,
            };
            // A file whose pages are all in the page cache is read at once and closed.
            if let Ok(file) = &opened
                && let Some(read) = read_cached(f, file, &mut scratch)
            {
                open.push((f, Some(Ok(Opened::Read(read)))));
                continue;
            }
            let opened = opened_with_metadata(f, opened);
            if let Ok((file, md)) = &opened {
                prefetch(file, md.len());
            }
            let opened = opened.map(|(file, md)| Opened::ToRead(file, md));
            open.push((f, Some(opened)));
        }
        for (f, opened) in open.drain(..) {
            let opened = match opened {
                Some(o) => o,
                None => match std::fs::File::open(&f.path) {
                    Err(e) if give_way && out_of_descriptors(&e) => return files,
                    reopened => {
                        opened_with_metadata(f, reopened).map(|(file, md)| Opened::ToRead(file, md))
                    }
                },
            };
            let read = opened.and_then(|o| match o {
                Opened::Read(read) => read,
                Opened::ToRead(file, md) => read_opened(f, file, &md),
            });
            let failed = read.is_err();
            files.push(read);
            if failed {
                return files;
            }
        }
    }
    files
}

/// A file of a batch once opened.
enum Opened {
    /// Read already (from the page cache), or the error its metadata gave.
    Read(Result<File, LoadError>),
    /// To be read once the batch is open (its pages prefetched).
    ToRead(std::fs::File, std::fs::Metadata),
}

/// Files up to this size are read from the page cache through one buffer
/// ([`read_cached`]); larger ones take the ordinary path.
const CACHED_READ_MAX: usize = 64 << 10;

/// `file` read whole without waiting for the disk (`preadv2(RWF_NOWAIT)` into `scratch`),
/// when all its pages are in the page cache and it is no larger than [`CACHED_READ_MAX`]:
/// one system call instead of `fstat`, `fadvise` and a read (and no `fstat` at all without
/// modification times). `None`: take the ordinary path (not cached, larger, or any error,
/// which that path then meets and reports).
fn read_cached(
    f: &Found,
    file: &std::fs::File,
    scratch: &mut Vec<u8>,
) -> Option<Result<File, LoadError>> {
    #[cfg(target_os = "linux")]
    {
        use rustix::io::{ReadWriteFlags, preadv2};
        scratch.resize(CACHED_READ_MAX, 0);
        let n = preadv2(
            file,
            &mut [std::io::IoSliceMut::new(scratch)],
            0,
            ReadWriteFlags::NOWAIT,
        )
        .ok()?;
        if n == scratch.len() {
            return None;
        }
        // A read that cannot go on without the disk stops at a page boundary: a length that
        // is not a multiple of any page size is the end of the file; at a boundary, a second
        // read tells the end from a page missing from the cache.
        if n % 4096 == 0 {
            let mut probe = [0u8; 1];
            let more = preadv2(
                file,
                &mut [std::io::IoSliceMut::new(&mut probe)],
                n as u64,
                ReadWriteFlags::NOWAIT,
            )
            .ok()?;
            if more != 0 {
                return None;
            }
        }
        let data = &scratch[..n];
        let data = data.strip_prefix(UTF8_BOM).unwrap_or(data);
        let mod_time = if MOD_TIMES.load(Ordering::Relaxed) {
            match file.metadata() {
                Ok(md) => md.modified().ok().map(GoTime::from_system),
                Err(e) => {
                    return Some(Err(LoadError::Io {
                        path: f.shown.display().to_string(),
                        source: e,
                    }));
                }
            }
        } else {
            None
        };
        Some(Ok(File {
            name: f.name.clone(),
            data: Arc::from(data),
            mod_time,
        }))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (f, file, scratch);
        None
    }
}

/// One opened file's [`File`].
fn read_opened(f: &Found, file: std::fs::File, md: &std::fs::Metadata) -> Result<File, LoadError> {
    if md.len() > MAX_DECOMPRESSED_FILE_SIZE {
        let base = f.name.rsplit('/').next().unwrap_or(&f.name).to_string();
        return Err(LoadError::FileTooLarge(base));
    }
    let data = read_shared(file, &f.path, md.len()).map_err(|e| LoadError::Read {
        path: f.name.clone(),
        source: e,
    })?;
    Ok(File {
        name: f.name.clone(),
        data,
        mod_time: md.modified().ok().map(GoTime::from_system),
    })
}

/// A found file as opened, with its metadata, or the error the walk reports for it.
fn opened_with_metadata(
    f: &Found,
    opened: std::io::Result<std::fs::File>,
) -> Result<(std::fs::File, std::fs::Metadata), LoadError> {
    let file = opened.map_err(|e| LoadError::Read {
        path: f.name.clone(),
        source: e,
    })?;
    let md = file.metadata().map_err(|e| LoadError::Io {
        path: f.shown.display().to_string(),
        source: e,
    })?;
    Ok((file, md))
}

/// `EMFILE` or `ENFILE`: the process or the system has no file descriptor left.
fn out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(23 | 24)) && cfg!(unix)
}

/// Asks the kernel to start reading `file` into the page cache (a hint: nothing happens
/// where the platform has no such call, or when it fails).
fn prefetch(file: &std::fs::File, len: u64) {
    #[cfg(target_os = "linux")]
    if let Some(len) = std::num::NonZeroU64::new(len) {
        let _ = rustix::fs::fadvise(file, 0, Some(len), rustix::fs::Advice::WillNeed);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, len);
}

/// Walks `dir`, the path the caller gave, used for every system call (a relative path is
/// resolved from fewer components than its absolute form); `shown` is its absolute form,
/// for messages. Each entry's type comes with the directory listing, so only symlinks are
/// `stat`ed; a regular file's size and time come from its open descriptor.
fn walk(
    dir: &Path,
    shown: &Path,
    rel: &str,
    rules: &Rules,
    out: &mut Vec<Found>,
    depth: usize,
) -> Result<(), LoadError> {
    if depth > 64 {
        return Err(LoadError::Io {
            path: shown.display().to_string(),
            source: std::io::Error::other("too many levels of symbolic links"),
        });
    }
    let io = |p: &Path, e: std::io::Error| LoadError::Io {
        path: p.display().to_string(),
        source: e,
    };
    let mut names: Vec<(String, std::fs::FileType)> = std::fs::read_dir(dir)
        .map_err(|e| io(shown, e))?
        .map(|e| {
            let e = e?;
            Ok((e.file_name().to_string_lossy().into_owned(), e.file_type()?))
        })
        .collect::<std::io::Result<_>>()
        .map_err(|e| io(shown, e))?;
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, file_type) in names {
        let n = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let path = dir.join(&name);
        // sympath.Walk resolves symlinks and walks their targets under the link's name.
        let (is_dir, is_file) = if file_type.is_symlink() {
            let md = std::fs::metadata(&path).map_err(|e| io(&shown.join(&name), e))?;
            (md.is_dir(), md.is_file())
        } else {
            (file_type.is_dir(), file_type.is_file())
        };
        if is_dir {
            if rules.ignore(&n, true) {
                continue;
            }
            walk(&path, &shown.join(&name), &n, rules, out, depth + 1)?;
            continue;
        }
        if rules.ignore(&n, false) {
            continue;
        }
        if !is_file {
            return Err(LoadError::Irregular(
                shown.join(&name).display().to_string(),
            ));
        }
        out.push(Found {
            name: n,
            path,
            shown: shown.join(&name),
        });
    }
    Ok(())
}

/// A file's contents, BOM stripped, read straight into the shared buffer the chart keeps
/// (no second copy of every file): `f` is `path` opened, `len` the size it had then, and a
/// file that turns out to be shorter or longer is read again the ordinary way.
fn read_shared(mut f: std::fs::File, path: &Path, len: u64) -> std::io::Result<Arc<[u8]>> {
    if let Ok(n) = usize::try_from(len) {
        let mut data: Arc<[u8]> = std::iter::repeat_n(0u8, n).collect();
        if let Some(buf) = Arc::get_mut(&mut data) {
            // Each read asks for one byte more than is left, so the read that fills the
            // buffer also shows the end of the file: the file has not grown when it stops
            // there (one system call a file rather than a second read returning 0).
            let mut filled = 0;
            let mut probe = [0u8; 1];
            let ended = loop {
                let want = n - filled;
                let mut parts = [
                    std::io::IoSliceMut::new(&mut buf[filled..]),
                    std::io::IoSliceMut::new(&mut probe),
                ];
                match f.read_vectored(&mut parts) {
                    Ok(0) => break filled == n,
                    Ok(k) if k <= want => {
                        filled += k;
                        if filled == n {
                            break true;
                        }
                    }
                    // Longer than its size was: read again below.
                    Ok(_) => break false,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            };
            if ended {
                if data.starts_with(UTF8_BOM) {
                    return Ok(Arc::from(&data[UTF8_BOM.len()..]));
                }
                return Ok(data);
            }
        }
    }
    let mut f = std::fs::File::open(path)?;
    let mut data = Vec::new();
    f.read_to_end(&mut data)?;
    Ok(strip_bom(data).into())
}

fn strip_bom(mut data: Vec<u8>) -> Vec<u8> {
    if data.starts_with(UTF8_BOM) {
        data.drain(..UTF8_BOM.len());
    }
    data
}

/// `loader.LoadFile`: an archive on disk (checked to be gzip first).
pub fn load_file(path: &Path) -> Result<Chart, LoadError> {
    let name = path.display().to_string();
    let md = std::fs::metadata(path).map_err(|e| LoadError::Io {
        path: name.clone(),
        source: e,
    })?;
    if md.is_dir() {
        return Err(LoadError::IsDirectory);
    }
    let data = std::fs::read(path).map_err(|e| LoadError::Io {
        path: name.clone(),
        source: e,
    })?;
    ensure_archive(&name, &data)?;
    load_archive(&data)
}

fn ensure_archive(name: &str, data: &[u8]) -> Result<(), LoadError> {
    if data.starts_with(b"\x1f\x8b\x08") {
        return Ok(());
    }
    if name.ends_with(".yml") || name.ends_with(".yaml") {
        return Err(LoadError::YamlNotArchive(name.to_owned()));
    }
    let head = &data[..data.len().min(512)];
    let content_type =
        if head.is_empty() || std::str::from_utf8(head).is_ok_and(|s| !s.contains('\0')) {
            "text/plain; charset=utf-8"
        } else {
            "application/octet-stream"
        };
    Err(LoadError::NotGzip {
        name: name.to_owned(),
        content_type,
    })
}

/// `loader.LoadArchive`: a gzipped tar held in memory (within one decompression budget,
/// subcharts included).
pub fn load_archive(data: &[u8]) -> Result<Chart, LoadError> {
    let budget = Budget::new();
    load_archive_within(data, &budget)
}

fn load_archive_within(data: &[u8], budget: &Budget) -> Result<Chart, LoadError> {
    let files = load_archive_files_within(data, budget)?;
    load_shared_files(files.into_iter().map(File::from).collect(), None, budget)
}

/// Go's `path.Clean`.
fn clean_path(p: &str) -> String {
    if p.is_empty() {
        return ".".to_owned();
    }
    let rooted = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            s => parts.push(s),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

/// `archive.LoadArchiveFiles`: the files of a gzipped tar with the first path component
/// removed, after Helm's safety and size checks (and within the decompression budget,
/// headers included: see [`MAX_DECOMPRESSED_CHART_SIZE`]).
pub fn load_archive_files(data: &[u8]) -> Result<Vec<BufferedFile>, LoadError> {
    load_archive_files_within(data, &Budget::new())
}

fn load_archive_files_within(data: &[u8], budget: &Budget) -> Result<Vec<BufferedFile>, LoadError> {
    if !data.starts_with(b"\x1f\x8b") {
        return Err(LoadError::Archive("gzip: invalid header".to_owned()));
    }
    let gz = Budgeted {
        inner: flate2::read::GzDecoder::new(data),
        budget,
    };
    let mut archive = tar::Archive::new(gz);
    let mut files = Vec::new();
    let entries = archive.entries().map_err(|e| budget.error(e))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| budget.error(e))?;
        let et = entry.header().entry_type();
        if et.is_dir()
            || et.is_pax_global_extensions()
            || et.is_pax_local_extensions()
            || et.is_gnu_longname()
            || et.is_gnu_longlink()
        {
            continue;
        }
        let raw_name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        if raw_name.ends_with('/') {
            continue;
        }
        let delim = if raw_name.contains('\\') { '\\' } else { '/' };
        let parts: Vec<&str> = raw_name.split(delim).collect();
        let n = parts[1..].join(&delim.to_string()).replace(delim, "/");
        if n.starts_with('/') {
            return Err(LoadError::AbsolutePath);
        }
        let n = clean_path(&n);
        if n == "." {
            return Err(LoadError::OutsideBase(raw_name));
        }
        if n.starts_with("..") {
            return Err(LoadError::ParentDirectory);
        }
        let nb = n.as_bytes();
        if nb.len() >= 3 && nb[0].is_ascii_alphabetic() && nb[1] == b':' && nb[2] == b'/' {
            return Err(LoadError::IllegalName);
        }
        if parts[0] == "Chart.yaml" {
            return Err(LoadError::ChartYamlNotInBase);
        }
        let size = entry
            .header()
            .size()
            .map_err(|e| LoadError::Archive(e.to_string()))?;
        if size > budget.remaining.get() {
            return Err(LoadError::ArchiveTooLarge);
        }
        if size > MAX_DECOMPRESSED_FILE_SIZE {
            return Err(LoadError::ArchiveFileTooLarge(raw_name));
        }
        let mut buf = Vec::new();
        let written = (&mut entry)
            .take(size)
            .read_to_end(&mut buf)
            .map_err(|e| budget.error(e))? as u64;
        if written < size {
            return Err(LoadError::ArchiveTooLarge);
        }
        let mtime = entry
            .header()
            .mtime()
            .ok()
            .and_then(|m| i64::try_from(m).ok());
        files.push(BufferedFile {
            name: n,
            data: strip_bom(buf),
            mod_time: mtime.map(|m| GoTime::from_unix(m, 0)),
        });
    }
    if files.is_empty() {
        return Err(LoadError::EmptyArchive);
    }
    Ok(files)
}

impl From<BufferedFile> for File {
    fn from(f: BufferedFile) -> File {
        File {
            name: f.name,
            data: f.data.into(),
            mod_time: f.mod_time,
        }
    }
}

/// `loader.LoadFiles`: classifies files into a chart and loads subcharts (directories and
/// archives under `charts/`, recursively).
pub fn load_files(files: Vec<BufferedFile>) -> Result<Chart, LoadError> {
    load_files_detected(files, None)
}

fn load_files_detected(
    files: Vec<BufferedFile>,
    detected: Option<Detected>,
) -> Result<Chart, LoadError> {
    load_shared_files(
        files.into_iter().map(File::from).collect(),
        detected,
        &Budget::new(),
    )
}

/// [`load_files`] on files whose contents are already shared: `raw` and the classified
/// lists (templates, `.Files`, the files of a subchart directory) hold the same bytes.
fn load_shared_files(
    files: Vec<File>,
    mut detected: Option<Detected>,
    budget: &Budget,
) -> Result<Chart, LoadError> {
    let mut metadata: Option<Metadata> = None;
    let mut mod_time = None;
    for f in &files {
        if f.name == "Chart.yaml" {
            let known = detected
                .take()
                .filter(|d| metadata.is_none() && *d.data == *f.data);
            let md = metadata.get_or_insert_with(Metadata::default);
            match known {
                Some(d) => *md = d.metadata,
                None => md.merge_yaml(&f.data).map_err(|e| LoadError::Decode {
                    file: "Chart.yaml",
                    source: e,
                })?,
            }
            if md.api_version.is_empty() {
                md.api_version = "v1".to_owned();
            }
            mod_time = f.mod_time;
        }
    }
    let mut c = Chart::new(Metadata::default());
    c.raw = files.clone();
    c.mod_time = mod_time;
    let mut subcharts: BTreeMap<String, Vec<File>> = BTreeMap::new();
    for f in files {
        match f.name.as_str() {
            "Chart.yaml" => {}
            "Chart.lock" => {
                c.lock = Some(Lock::from_yaml(&f.data).map_err(|e| LoadError::Decode {
                    file: "Chart.lock",
                    source: e,
                })?);
            }
            "values.yaml" => {
                c.values = Some(load_values_bytes(&f.data).map_err(LoadError::Values)?);
            }
            "values.schema.json" => {
                c.schema = Some(f.data.to_vec());
                c.schema_mod_time = f.mod_time;
            }
            "requirements.yaml" => {
                let md = metadata.get_or_insert_with(Metadata::default);
                md.merge_yaml(&f.data).map_err(|e| LoadError::Decode {
                    file: "requirements.yaml",
                    source: e,
                })?;
                if md.api_version == "v1" {
                    c.files.push(f);
                }
            }
            "requirements.lock" => {
                c.lock = Some(Lock::from_yaml(&f.data).map_err(|e| LoadError::Decode {
                    file: "requirements.lock",
                    source: e,
                })?);
                let md = metadata.get_or_insert_with(Metadata::default);
                if md.api_version == "v1" {
                    c.files.push(f);
                }
            }
            n if n.starts_with("templates/") => c.templates.push(f),
            n if n.starts_with("charts/") => {
                if go_ext(n) == ".prov" {
                    c.files.push(f);
                    continue;
                }
                let fname = &n["charts/".len()..];
                let cname = fname.split('/').next().unwrap_or("").to_owned();
                subcharts.entry(cname).or_default().push(File {
                    name: fname.to_owned(),
                    data: f.data,
                    mod_time: f.mod_time,
                });
            }
            _ => c.files.push(f),
        }
    }
    let mut md = metadata.ok_or(LoadError::MissingChartYaml)?;
    md.validate()?;
    c.metadata = md;
    for (n, files) in subcharts {
        if n.starts_with('_') || n.starts_with('.') {
            continue;
        }
        let sub = if go_ext(&n) == ".tgz" {
            let first = &files[0];
            if first.name != n {
                return Err(LoadError::SubchartTar {
                    parent: c.name().to_owned(),
                    expected: n,
                    got: first.name.clone(),
                });
            }
            load_archive_within(&first.data, budget)
        } else {
            let buff: Vec<File> = files
                .into_iter()
                .filter_map(|f| {
                    let (_, rest) = f.name.split_once('/')?;
                    Some(File {
                        name: rest.to_owned(),
                        data: f.data,
                        mod_time: f.mod_time,
                    })
                })
                .collect();
            load_shared_files(buff, None, budget)
        };
        let sub = sub.map_err(|e| LoadError::Subchart {
            name: n.clone(),
            parent: c.name().to_owned(),
            source: Box::new(e),
        })?;
        c.dependencies.push(sub);
    }
    Ok(c)
}

/// Go's `filepath.Ext`.
fn go_ext(p: &str) -> &str {
    let base_start = p.rfind('/').map_or(0, |i| i + 1);
    match p[base_start..].rfind('.') {
        Some(i) => &p[base_start + i..],
        None => "",
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    /// A gzipped tar of `entries` (path, contents) under `top/`.
    fn archive(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut tar = tar::Builder::new(gz);
        for (path, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            tar.append_data(&mut h, path, *data).expect("append");
        }
        tar.into_inner().expect("tar").finish().expect("gzip")
    }

    /// A gzipped tar whose first header is an extension header of `kind` declaring 1 GiB,
    /// followed by `zeros` bytes of it (the stream ends there).
    fn huge_extension_header(kind: tar::EntryType, zeros: usize) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(kind);
        h.set_path("hostile/extension").expect("path");
        h.set_size(1 << 30);
        h.set_mode(0o644);
        h.set_cksum();
        gz.write_all(h.as_bytes()).expect("header");
        let block = vec![0u8; 1 << 20];
        let mut left = zeros;
        while left > 0 {
            let n = left.min(block.len());
            gz.write_all(&block[..n]).expect("zeros");
            left -= n;
        }
        gz.finish().expect("gzip")
    }

    #[test]
    fn a_pax_header_declaring_a_gigabyte_is_cut_off_at_the_archive_budget() {
        // A little past the budget: the reader stops there instead of buffering the
        // declared gigabyte (before, it read all that was there and failed at its end).
        let data = huge_extension_header(
            tar::EntryType::XHeader,
            MAX_DECOMPRESSED_CHART_SIZE as usize + (4 << 20),
        );
        assert!(data.len() < 1 << 20, "a bomb: {} bytes", data.len());
        let err = load_archive(&data).expect_err("refused");
        assert!(matches!(err, LoadError::ArchiveTooLarge), "{err}");
    }

    #[test]
    fn a_gnu_long_name_declaring_a_gigabyte_is_cut_off_at_the_archive_budget() {
        let data = huge_extension_header(
            tar::EntryType::GNULongName,
            MAX_DECOMPRESSED_CHART_SIZE as usize + (4 << 20),
        );
        let err = load_archive_files(&data).expect_err("refused");
        assert!(matches!(err, LoadError::ArchiveTooLarge), "{err}");
    }

    #[test]
    fn subchart_archives_share_their_parents_decompression_budget() {
        // Each subchart gunzips to 60 MiB (twelve 5 MiB files, each under the file limit,
        // the archive under its own 100 MiB): together they are past the budget.
        let chunk = vec![b'a'; MAX_DECOMPRESSED_FILE_SIZE as usize];
        let sub = |name: &str| {
            let chart_yaml = format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n");
            let mut entries: Vec<(String, &[u8])> =
                vec![(format!("{name}/Chart.yaml"), chart_yaml.as_bytes())];
            let names: Vec<String> = (0..12).map(|i| format!("{name}/f{i}.txt")).collect();
            entries.extend(names.iter().map(|n| (n.clone(), &chunk[..])));
            let refs: Vec<(&str, &[u8])> = entries.iter().map(|(n, d)| (n.as_str(), *d)).collect();
            archive(&refs)
        };
        let (a, b) = (sub("a"), sub("b"));
        // One of them alone loads.
        load_archive(&a).expect("60 MiB is within the budget");
        let parent = archive(&[
            (
                "parent/Chart.yaml",
                b"apiVersion: v2\nname: parent\nversion: 0.1.0\n",
            ),
            ("parent/charts/a.tgz", &a),
            ("parent/charts/b.tgz", &b),
        ]);
        let err = load_archive(&parent).expect_err("refused");
        match err {
            LoadError::Subchart { source, .. } => {
                assert!(matches!(*source, LoadError::ArchiveTooLarge), "{source}")
            }
            other => panic!("expected a subchart too large, got {other}"),
        }
    }

    /// `n` files `f000.txt`... in a fresh directory, and what the walk finds there.
    fn files(n: usize) -> (tempfile::TempDir, Vec<Found>) {
        let dir = tempfile::tempdir().expect("temp dir");
        for i in 0..n {
            let body = format!("file {i}\n").repeat(1 + i % 7);
            std::fs::write(dir.path().join(format!("f{i:03}.txt")), body).expect("write");
        }
        let mut found = Vec::new();
        walk(dir.path(), dir.path(), "", &Rules::empty(), &mut found, 0).expect("walk");
        (dir, found)
    }

    fn again(found: &[Found]) -> Vec<Found> {
        found
            .iter()
            .map(|f| Found {
                name: f.name.clone(),
                path: f.path.clone(),
                shown: f.shown.clone(),
            })
            .collect()
    }

    /// Files of every size around the page and buffer boundaries read whole, from the page
    /// cache or, when that is declined, the ordinary way, BOM removed either way.
    #[test]
    fn files_read_from_the_page_cache_are_read_whole() {
        let dir = tempfile::tempdir().expect("temp dir");
        let sizes = [
            0,
            1,
            4095,
            4096,
            4097,
            8192,
            CACHED_READ_MAX - 1,
            CACHED_READ_MAX,
            CACHED_READ_MAX + 1,
            300_000,
        ];
        let mut found = Vec::new();
        let mut expected = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            for bom in [false, true] {
                let body: Vec<u8> = (0..n).map(|k| b'a' + ((k * 7 + i) % 26) as u8).collect();
                let mut written = if bom { UTF8_BOM.to_vec() } else { Vec::new() };
                written.extend_from_slice(&body);
                let name = format!("f{i:02}{}.txt", if bom { "b" } else { "" });
                let path = dir.path().join(&name);
                std::fs::write(&path, &written).expect("write");
                // Read once, so that its pages are cached however the directory was made.
                assert_eq!(std::fs::read(&path).expect("read"), written);
                found.push(Found {
                    name: name.clone(),
                    shown: path.clone(),
                    path,
                });
                expected.push((name, body));
            }
        }
        let mut scratch = Vec::new();
        let mut cached = 0;
        for (f, (name, body)) in found.iter().zip(&expected) {
            let file = std::fs::File::open(&f.path).expect("open");
            if let Some(read) = read_cached(f, &file, &mut scratch) {
                let read = read.expect("read");
                assert_eq!((&read.name, &*read.data), (name, &body[..]), "{name}");
                cached += 1;
            }
        }
        #[cfg(target_os = "linux")]
        {
            // All but the files of the buffer's size or more (a BOM counts), unless the
            // kernel dropped pages in between: most of them, then; none where the file
            // system cannot read without waiting (`EOPNOTSUPP`).
            let smaller = found
                .iter()
                .filter(|f| {
                    std::fs::metadata(&f.path).is_ok_and(|m| m.len() < CACHED_READ_MAX as u64)
                })
                .count();
            let file = std::fs::File::open(&found[2].path).expect("open");
            let nowait = rustix::io::preadv2(
                &file,
                &mut [std::io::IoSliceMut::new(&mut [0u8; 16])],
                0,
                rustix::io::ReadWriteFlags::NOWAIT,
            );
            assert!(cached <= smaller, "{cached} of {smaller}");
            if nowait != Err(rustix::io::Errno::OPNOTSUPP) {
                assert!(cached * 2 >= smaller, "{cached} of {smaller}");
            }
        }
        let read = read_batches(&found, READ_BATCH, false);
        assert_eq!(read.len(), expected.len());
        for (r, (name, body)) in read.into_iter().zip(&expected) {
            let r = r.expect("read");
            assert_eq!((&r.name, &*r.data), (name, &body[..]), "{name}");
        }
    }

    #[test]
    fn files_read_on_two_threads_are_those_read_on_one_in_the_same_order() {
        let (_dir, found) = files(150);
        let one = read_found_on(again(&found), false).expect("read on one thread");
        let two = read_found_on(found, true).expect("read on two threads");
        assert_eq!(one.len(), 150);
        let names = |v: &[File]| v.iter().map(|f| f.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&one), names(&two));
        assert!(one.iter().zip(&two).all(|(a, b)| a.data == b.data));
        assert_eq!(&*one[8].data, "file 8\nfile 8\n".as_bytes());
    }

    #[test]
    fn the_first_file_that_cannot_be_read_is_the_error_on_one_thread_or_two() {
        let (dir, found) = files(150);
        // Gone after the walk: the first of them, in the walk's order, is reported.
        for gone in ["f097.txt", "f041.txt", "f120.txt"] {
            std::fs::remove_file(dir.path().join(gone)).expect("remove");
        }
        for two_threads in [false, true] {
            let e = read_found_on(again(&found), two_threads).expect_err("a file is gone");
            assert!(
                e.to_string().starts_with("error reading f041.txt: "),
                "{two_threads}: {e}"
            );
        }
    }
}

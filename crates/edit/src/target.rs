//! What an edit may change: a safetensors file, an HF repo of safetensors shards, or a GGUF file,
//! as a table of tensors with the absolute byte range of each in its file.
//!
//! Opening checks what makes an in-place write unsafe and refuses it with the reason, before any
//! byte is read: a hard link (the edit would change the other names too), a symlink out of the
//! repo (or into a Hugging Face cache's `blobs/`, whose file names are the content's hashes), a
//! file without any write permission bit (refused even for root: the mode says the owner wants it
//! kept), a file that is not regular, and a FUSE or ramfs filesystem (the write cannot be made
//! durable in place). Headers are parsed by the format crates' strict readers; an edit never
//! changes a header or a file's size.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use weightport_core::{
    shown, ByteSource, DType, Error, Format, Identity, Layout, Limits, Location, ReadOptions,
    Result,
};

/// The container format of a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Container {
    /// safetensors (a file, or the shards of an HF repo).
    Safetensors,
    /// GGUF (one file).
    Gguf,
}

impl Container {
    /// The lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Container::Safetensors => "safetensors",
            Container::Gguf => "gguf",
        }
    }

    fn format(self) -> Format {
        match self {
            Container::Safetensors => Format::Safetensors,
            Container::Gguf => Format::Gguf,
        }
    }
}

/// One file of a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetFile {
    /// The file itself (symlinks resolved).
    pub path: PathBuf,
    /// The path as the user (or the index) named it, for messages.
    pub shown: PathBuf,
    /// Device and inode when opened: a journal names the file by them.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Length in bytes (never changed by an edit).
    pub size: u64,
    /// Absolute offset where tensor data begins (everything before is the header).
    pub data_start: u64,
}

/// One tensor and where its bytes lie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// Name.
    pub name: String,
    /// Stored dtype (a ggml block type for quantized GGUF tensors).
    pub dtype: DType,
    /// Shape, outermost first.
    pub shape: Vec<u64>,
    /// Index into [`Target::files`].
    pub file: usize,
    /// Absolute offset of its first byte in that file.
    pub offset: u64,
    /// Length in bytes.
    pub byte_len: u64,
}

impl Placed {
    /// The bytes of one indivisible unit: an element, or for a block type one row of the
    /// innermost axis (ggml quantizes rows independently, never less).
    pub fn unit(&self) -> u64 {
        match self.dtype.layout() {
            Layout::Block { elems, bytes } => {
                let n = self.shape.last().copied().unwrap_or(1);
                n / u64::from(elems) * u64::from(bytes)
            }
            Layout::Bits(b) => u64::from(b / 8).max(1),
        }
    }

    /// Bytes of one slab along axis 0 (the "row" a delta ships), or the whole tensor for a
    /// scalar.
    pub fn slab(&self) -> u64 {
        match self.shape.first() {
            Some(&n) if n > 0 => self.byte_len / n,
            _ => self.byte_len,
        }
    }

    /// Where this tensor is, for messages.
    pub fn at(&self, t: &Target) -> Location {
        Location::file(&t.files[self.file].shown)
            .tensor(self.name.clone())
            .at(self.offset)
    }
}

/// An opened target: its files and tensors, and where its side files (journal, undo, locks) go.
#[derive(Debug, Clone)]
pub struct Target {
    /// The path given.
    pub given: PathBuf,
    /// The directory holding the files (resolved); side files go here.
    pub dir: PathBuf,
    /// True for an HF repo (a directory or an index).
    pub is_repo: bool,
    /// The container format.
    pub container: Container,
    /// The files, in the order tensors refer to them.
    pub files: Vec<TargetFile>,
    /// Every tensor.
    pub tensors: Vec<Placed>,
    by_name: HashMap<String, usize>,
}

/// `.NAME` for single files and `.weightport-edit` for repos: the stem of every side file.
pub(crate) const REPO_SIDE: &str = ".weightport-edit";

fn refused(path: &Path, reason: impl Into<String>) -> Error {
    Error::Refused {
        at: Location::file(path),
        reason: reason.into(),
    }
}

impl Target {
    /// Opens `path` to be edited: a safetensors or GGUF file, an `*.index.json`, or an HF repo
    /// directory, refusing what cannot be edited safely in place (module docs).
    pub fn open(path: &Path) -> Result<Target> {
        Self::open_as(path, true)
    }

    /// Opens `path` to be read only (the base and result of a delta): no write checks.
    pub fn open_read(path: &Path) -> Result<Target> {
        Self::open_as(path, false)
    }

    fn open_as(path: &Path, write: bool) -> Result<Target> {
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, "open", e))?;
        if meta.is_dir() {
            return Self::open_repo(path, None, write);
        }
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with(".index.json") {
            let dir = parent(path);
            return Self::open_repo(&dir, Some(path.to_path_buf()), write);
        }
        let dir = parent(path);
        let file = check_file(path, &dir, write)?;
        let container = match remote_source(&file.path, write)? {
            Some(src) => sniff_source(src.as_ref())?,
            None => sniff_container(&file.path)?,
        };
        let real_dir = file.path.parent().map_or(dir, Path::to_path_buf);
        Self::build(path, &real_dir, false, container, vec![file])
    }

    fn open_repo(dir: &Path, index: Option<PathBuf>, write: bool) -> Result<Target> {
        use weightport_hf::Weights;
        let index = match index {
            Some(i) => Weights::SafetensorsIndex(i),
            None => weightport_hf::find_weights(dir)?.0,
        };
        let names = match &index {
            Weights::SafetensorsFile(p) => vec![file_name(p)],
            Weights::SafetensorsIndex(p) => {
                weightport_hf::read_index(p, &weightport_core::Limits::default())?.shards()
            }
            Weights::BinFile(p) | Weights::BinIndex(p) => {
                return Err(Error::unsupported(
                    Location::file(p),
                    Format::PytorchZip,
                    "editing in place: only safetensors and GGUF files are edited in place (a \
                     .bin is a pickle); convert it to safetensors first",
                ))
            }
        };
        let mut files = Vec::new();
        for n in &names {
            if n.contains('/') {
                return Err(refused(
                    &dir.join(n),
                    "a shard in a subdirectory of the repo: edits keep every shard beside its journal",
                ));
            }
            let p = weightport_hf::resolve_in_repo(dir, n)?;
            files.push(check_file(&p, dir, write)?);
        }
        let real = dir
            .canonicalize()
            .map_err(|e| Error::io(dir, "resolve", e))?;
        Self::build(dir, &real, true, Container::Safetensors, files)
    }

    fn build(
        given: &Path,
        dir: &Path,
        is_repo: bool,
        container: Container,
        mut files: Vec<TargetFile>,
    ) -> Result<Target> {
        let mut tensors = Vec::new();
        for (i, f) in files.iter_mut().enumerate() {
            let (start, mut ts) = match remote_source(&f.path, false)? {
                Some(src) => {
                    // A remote input's file: its length is its object's (the view's file is
                    // an empty stand-in).
                    f.size = src.len();
                    layout_of_source(container, src, i)?
                }
                None => read_layout(container, f, i)?,
            };
            f.data_start = start;
            tensors.append(&mut ts);
        }
        let mut by_name = HashMap::new();
        for (i, t) in tensors.iter().enumerate() {
            if let Some(j) = by_name.insert(t.name.clone(), i) {
                let other: &Placed = &tensors[j];
                return Err(Error::malformed(
                    Location::file(&files[t.file].shown).tensor(t.name.clone()),
                    container.format(),
                    format!("also in {}", shown(&files[other.file].shown)),
                ));
            }
        }
        Ok(Target {
            given: given.to_path_buf(),
            dir: dir.to_path_buf(),
            is_repo,
            container,
            files,
            tensors,
            by_name,
        })
    }

    /// The tensor named `name`.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// The tensor named `name`, or an error naming the target and the nearest names.
    pub fn get(&self, name: &str) -> Result<usize> {
        self.find(name).ok_or_else(|| {
            Error::Usage(format!(
                "{}: no tensor `{}`{}",
                shown(&self.given),
                weightport_core::sanitize(name),
                self.hint(name)
            ))
        })
    }

    fn hint(&self, name: &str) -> String {
        let tail = name.rsplit('.').next().unwrap_or(name);
        let near: Vec<&str> = self
            .tensors
            .iter()
            .map(|t| t.name.as_str())
            .filter(|n| n.ends_with(tail))
            .take(3)
            .collect();
        if near.is_empty() {
            String::new()
        } else {
            format!(
                " (similar: {})",
                weightport_core::sanitize(&near.join(", "))
            )
        }
    }

    /// The stem of this target's side files: `.NAME` for a file, `.weightport-edit` for a repo.
    pub fn side_stem(&self) -> String {
        if self.is_repo {
            REPO_SIDE.to_string()
        } else {
            format!(".{}", file_name(&self.files[0].path))
        }
    }

    /// A side file of this target: `dir/STEM.suffix`.
    pub fn side(&self, suffix: &str) -> PathBuf {
        self.dir.join(format!("{}.{suffix}", self.side_stem()))
    }
}

fn parent(p: &Path) -> PathBuf {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The file name of `p` as a string (lossy).
pub(crate) fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The bytes of a file a target only reads (a delta's base or result) when it is a remote
/// input's view file: an empty stand-in that the process's storage answers with its remote
/// object (see weightport-remote). `None` for every local file, and for every file written.
pub(crate) fn remote_source(path: &Path, write: bool) -> Result<Option<Arc<dyn ByteSource>>> {
    if write || std::fs::metadata(path).map_or(true, |m| m.len() > 0) {
        return Ok(None);
    }
    let src = weightport_core::mapped::default_storage().open(path, ", expected a file")?;
    Ok(matches!(src.identity(), Identity::Object { .. }).then_some(src))
}

/// [`sniff_container`] of a remote object.
fn sniff_source(src: &dyn ByteSource) -> Result<Container> {
    let mut head = [0u8; 4];
    let n = src.len().min(4) as usize;
    src.read_at(0, &mut head[..n])?;
    Ok(match weightport_gguf::probe(&head[..n]) {
        true => Container::Gguf,
        false => Container::Safetensors,
    })
}

/// [`read_layout`] of a remote object, by the same strict readers.
fn layout_of_source(
    c: Container,
    src: Arc<dyn ByteSource>,
    file: usize,
) -> Result<(u64, Vec<Placed>)> {
    match c {
        Container::Safetensors => {
            let s = weightport_safetensors::SafetensorsFile::from_source(src, &Limits::default())?;
            Ok((s.data_start(), placed(&s, file, |i| s.tensor_offset(i))))
        }
        Container::Gguf => {
            let g = weightport_gguf::GgufFile::from_source(src, &ReadOptions::default())?;
            Ok((g.data_start(), placed(&g, file, |i| g.tensor_offset(i))))
        }
    }
}

/// The tensors of `s`, in file `file`, each at `offset(i)`.
fn placed(
    s: &dyn weightport_core::TensorSource,
    file: usize,
    offset: impl Fn(usize) -> u64,
) -> Vec<Placed> {
    s.tensors()
        .iter()
        .enumerate()
        .map(|(i, t)| Placed {
            name: t.name.clone(),
            dtype: t.dtype,
            shape: t.shape.clone(),
            file,
            offset: offset(i),
            byte_len: t.byte_len,
        })
        .collect()
}

fn sniff_container(path: &Path) -> Result<Container> {
    use std::io::Read;
    let mut head = [0u8; 4];
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let n = f.read(&mut head).map_err(|e| Error::io(path, "read", e))?;
    Ok(if weightport_gguf::probe(&head[..n]) {
        Container::Gguf
    } else {
        Container::Safetensors
    })
}

/// Filesystems where an in-place write cannot be made durable: FUSE (object-store mounts
/// rewrite whole objects, and fsync may not reach storage) and ramfs.
const NOT_DURABLE: &[(i64, &str)] = &[
    (0x6573_5546, "a FUSE filesystem (an object-store mount or similar: an in-place write may rewrite the whole object, and fsync may not make it durable)"),
    (0x8584_58f6, "ramfs (fsync does nothing and nothing survives a restart)"),
];

fn fs_kind(path: &Path) -> Option<i64> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: an all-zero statfs is a valid value to be overwritten.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `s` a writable statfs.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut s) };
    #[allow(clippy::unnecessary_cast)]
    (rc == 0).then_some(s.f_type as i64)
}

/// Resolves and checks one file of a target (see the module docs); `dir` is the repo (or the
/// directory a single file was named in). Only a file to be written gets the write checks.
fn check_file(path: &Path, dir: &Path, write: bool) -> Result<TargetFile> {
    let link = std::fs::symlink_metadata(path).map_err(|e| Error::io(path, "open", e))?;
    let real = path
        .canonicalize()
        .map_err(|e| Error::io(path, "resolve", e))?;
    if link.file_type().is_symlink() {
        let root = dir
            .canonicalize()
            .map_err(|e| Error::io(dir, "resolve", e))?;
        if real.components().any(|c| c.as_os_str() == "blobs") && !real.starts_with(&root) {
            return Err(refused(path, "a symlink into a Hugging Face cache's blobs/: a cached file is named by its content's hash, and editing it in place would make the cache lie; convert the snapshot to a directory of your own first"));
        }
        if real.parent() != Some(root.as_path()) {
            return Err(refused(path, format!("a symlink out of the repo (to {}): edits change only files inside the repo directory", shown(&real))));
        }
    }
    let meta = std::fs::metadata(&real).map_err(|e| Error::io(path, "stat", e))?;
    if !meta.is_file() {
        return Err(refused(path, "not a regular file"));
    }
    if write {
        check_writable(path, &real, &meta)?;
    }
    Ok(TargetFile {
        path: real,
        shown: path.to_path_buf(),
        dev: meta.dev(),
        ino: meta.ino(),
        size: meta.len(),
        data_start: 0,
    })
}

fn check_writable(path: &Path, real: &Path, meta: &std::fs::Metadata) -> Result<()> {
    if meta.nlink() > 1 {
        return Err(refused(path, format!("a hard link ({} names for one file): an edit in place would change every name; copy it first", meta.nlink())));
    }
    if meta.mode() & 0o222 == 0 {
        return Err(refused(path, format!("the file is read-only (mode {:o}); edit changes files in place: make it writable first if that is meant", meta.mode() & 0o7777)));
    }
    if let Some((_, why)) = fs_kind(real).and_then(|k| NOT_DURABLE.iter().find(|(m, _)| *m == k)) {
        return Err(refused(path, format!("on {why}")));
    }
    Ok(())
}

/// The data start and the tensors of one file, from its header.
fn read_layout(c: Container, f: &TargetFile, file: usize) -> Result<(u64, Vec<Placed>)> {
    match c {
        Container::Safetensors => {
            let s = weightport_safetensors::SafetensorsFile::open(&f.path)?;
            Ok((s.data_start(), placed(&s, file, |i| s.tensor_offset(i))))
        }
        Container::Gguf => {
            let g = weightport_gguf::open(&f.path, &ReadOptions::default())?;
            Ok((g.data_start(), placed(&g, file, |i| g.tensor_offset(i))))
        }
    }
}

/// Opens a target file for reading and writing, not following a symlink.
pub(crate) fn open_rw(path: &Path) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| Error::io(path, "open for writing", e))
}

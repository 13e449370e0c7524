//! Where `convert` puts each output tensor: the layout the format's own sink gives the output
//! files, laid out in a scratch directory and read back with the format's reader.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use weightport_core::{Error, Format, ReadOptions, Result, TensorSource};
use weightport_engine::{ConvertOptions, Job};

/// Where `convert` puts each output tensor: per tensor (file, absolute offset), per file the
/// offset of its data section.
pub(crate) struct Layout {
    pub at: Vec<(usize, u64)>,
    pub data_start: Vec<u64>,
}

/// A directory of this process's, removed with what is in it when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch_dir() -> Result<Scratch> {
    let base = std::env::temp_dir();
    for n in 0..1000u32 {
        let p = base.join(format!(".wp-layout.{}.{n}", std::process::id()));
        match std::fs::create_dir(&p) {
            Ok(()) => return Ok(Scratch(p)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io(&base, "create a scratch directory in", e)),
        }
    }
    Err(Error::Internal(format!(
        "no free scratch directory name in {}",
        base.display()
    )))
}

/// Data start and each tensor's absolute offset (by name) in a file the sink staged, read back
/// with the format's reader.
fn offsets_in(
    path: &Path,
    format: Format,
    read: &ReadOptions,
) -> Result<(u64, HashMap<String, u64>)> {
    fn named(src: &dyn TensorSource, off: impl Fn(usize) -> u64) -> HashMap<String, u64> {
        src.tensors()
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), off(i)))
            .collect()
    }
    match format {
        Format::Gguf => {
            let g = weightport_gguf::GgufFile::open(path, read)?;
            Ok((g.data_start(), named(&g, |i| g.tensor_offset(i))))
        }
        Format::Safetensors => {
            let s = weightport_safetensors::SafetensorsFile::open(path)?;
            Ok((s.data_start(), named(&s, |i| s.tensor_offset(i))))
        }
        other => Err(Error::Usage(format!(
            "plan: {} output cannot be split into units",
            other.name()
        ))),
    }
}

/// The layout `convert` gives the output, from the format's own sink: it lays the files out in
/// a scratch directory (sparse temp files, removed after), and the offsets are read back from
/// their headers with the format's reader.
pub(crate) fn layout(job: &Job, opts: &ConvertOptions) -> Result<Layout> {
    let scratch = scratch_dir()?;
    let (sink, staged) = job.stage(Some(&scratch.0))?;
    let files = &job.output_plan().files;
    let mut at = vec![None; job.tensor_count()];
    let mut data_start = Vec::with_capacity(files.len());
    for (f, pf) in files.iter().enumerate() {
        let moved = scratch.0.join(pf.path.file_name().unwrap_or_default());
        let st = staged.iter().find(|s| s.path == moved);
        let st = st.ok_or_else(|| {
            Error::Internal(format!("the sink did not stage {}", moved.display()))
        })?;
        let (start, offsets) = offsets_in(&st.temp, st.format, &opts.open.read)?;
        for &k in &pf.tensors {
            let name = &job.tensor(k).name;
            let off = offsets.get(name).ok_or_else(|| {
                Error::Internal(format!(
                    "tensor `{}` is not in the laid-out {}",
                    weightport_core::sanitize(name),
                    moved.display()
                ))
            })?;
            at[k] = Some((f, *off));
        }
        data_start.push(start);
    }
    drop(sink);
    let at = at.into_iter().collect::<Option<Vec<_>>>();
    let at = at.ok_or_else(|| Error::Internal("an output tensor is in no output file".into()))?;
    Ok(Layout { at, data_start })
}

//! Several sources seen as one (the shards of a repo, or several input files).

use std::collections::HashMap;
use std::path::PathBuf;

use crate::{sanitize, Access, Error, Format, Metadata, Result, TensorInfo, TensorSource};

/// The concatenation of sources, tensors in source order then file order. Names must be unique.
pub struct MultiSource {
    parts: Vec<Box<dyn TensorSource>>,
    /// Global index → (part, local index).
    map: Vec<(usize, usize)>,
    infos: Vec<TensorInfo>,
    metadata: Metadata,
}

impl MultiSource {
    /// Joins `parts`. Fails if two parts hold a tensor of the same name. Metadata: the union,
    /// first value wins.
    pub fn new(parts: Vec<Box<dyn TensorSource>>) -> Result<Self> {
        let mut map = Vec::new();
        let mut infos = Vec::new();
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut metadata = Metadata::new();
        for (p, part) in parts.iter().enumerate() {
            for (k, v) in part.metadata().iter() {
                if metadata.get(k).is_none() {
                    metadata.insert(k, v.clone());
                }
            }
            for (l, t) in part.tensors().iter().enumerate() {
                if let Some(&other) = seen.get(&t.name) {
                    return Err(Error::Usage(format!(
                        "tensor `{}` is in both {} and {}",
                        sanitize(&t.name),
                        crate::shown(&parts[other].file_of(0)),
                        crate::shown(&part.file_of(l))
                    )));
                }
                seen.insert(t.name.clone(), p);
                map.push((p, l));
                infos.push(t.clone());
            }
        }
        Ok(MultiSource {
            parts,
            map,
            infos,
            metadata,
        })
    }
}

impl TensorSource for MultiSource {
    fn format(&self) -> Format {
        self.parts
            .first()
            .map(|p| p.format())
            .unwrap_or(Format::Safetensors)
    }
    fn metadata(&self) -> &Metadata {
        &self.metadata
    }
    fn tensors(&self) -> &[TensorInfo] {
        &self.infos
    }
    fn files(&self) -> Vec<PathBuf> {
        self.parts.iter().flat_map(|p| p.files()).collect()
    }
    fn file_of(&self, index: usize) -> PathBuf {
        let (p, l) = self.map[index];
        self.parts[p].file_of(l)
    }
    fn bytes(&self, index: usize) -> Option<&[u8]> {
        let (p, l) = self.map[index];
        self.parts[p].bytes(l)
    }
    fn read_into(&self, index: usize, offset: u64, dst: &mut [u8]) -> Result<()> {
        let (p, l) = self.map[index];
        self.parts[p].read_into(l, offset, dst)
    }
    fn access(&self, index: usize) -> Access {
        let (p, l) = self.map[index];
        self.parts[p].access(l)
    }
    fn unconverted(&self) -> Vec<(String, String)> {
        self.parts.iter().flat_map(|p| p.unconverted()).collect()
    }
    fn release(&self, index: usize, offset: u64, len: u64) {
        let (p, l) = self.map[index];
        self.parts[p].release(l, offset, len)
    }
    fn will_need(&self, index: usize, offset: u64, len: u64) {
        let (p, l) = self.map[index];
        self.parts[p].will_need(l, offset, len)
    }
}

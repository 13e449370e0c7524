//! A source followed by tensors computed in memory: an architecture's generated tensors
//! (Llama 3's `rope_freqs.weight`) and merged adapters' factors, numbered after the source's
//! own, with the scaled weights of an FP8 release read as F32 ([`Dequantized`]).

use std::path::PathBuf;

use weightport_core::{Access, Metadata, Result, TensorInfo, TensorSource};

use crate::dequantized::Dequantized;

/// A source plus tensors computed in memory (appended after the source's own), with the
/// scaled weights of an FP8 release read as F32 ([`Dequantized`]).
pub(crate) struct WithGenerated<'a> {
    inner: &'a dyn TensorSource,
    tensors: Vec<TensorInfo>,
    data: Vec<Vec<u8>>,
    origin: PathBuf,
    dequant: Dequantized,
}

impl<'a> WithGenerated<'a> {
    /// `inner`'s tensors followed by `generated` (computed from `origin`, e.g. a config.json).
    pub(crate) fn new(
        inner: &'a dyn TensorSource,
        generated: Vec<(TensorInfo, Vec<u8>)>,
        origin: PathBuf,
        dequant: Dequantized,
    ) -> Self {
        let mut tensors: Vec<TensorInfo> = (inner.tensors().iter().enumerate())
            .map(|(i, t)| dequant.info(i, t))
            .collect();
        let mut data = Vec::with_capacity(generated.len());
        for (info, bytes) in generated {
            tensors.push(info);
            data.push(bytes);
        }
        WithGenerated {
            inner,
            tensors,
            data,
            origin,
            dequant,
        }
    }

    /// Appends more in-memory tensors after the ones held.
    pub(crate) fn append(&mut self, generated: Vec<(TensorInfo, Vec<u8>)>) {
        for (info, bytes) in generated {
            self.tensors.push(info);
            self.data.push(bytes);
        }
    }

    fn own(&self, index: usize) -> Option<&[u8]> {
        let n = self.inner.tensors().len();
        (index >= n).then(|| self.data[index - n].as_slice())
    }
}

impl TensorSource for WithGenerated<'_> {
    fn format(&self) -> weightport_core::Format {
        self.inner.format()
    }
    fn metadata(&self) -> &Metadata {
        self.inner.metadata()
    }
    fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }
    fn files(&self) -> Vec<PathBuf> {
        self.inner.files()
    }
    fn file_of(&self, index: usize) -> PathBuf {
        match self.own(index) {
            Some(_) => self.origin.clone(),
            None => self.inner.file_of(index),
        }
    }
    fn bytes(&self, index: usize) -> Option<&[u8]> {
        match self.own(index) {
            Some(b) => Some(b),
            None if self.dequant.has(index) => None,
            None => self.inner.bytes(index),
        }
    }
    fn read_into(&self, index: usize, offset: u64, dst: &mut [u8]) -> Result<()> {
        match self.own(index) {
            Some(b) => {
                let s = offset as usize;
                dst.copy_from_slice(&b[s..s + dst.len()]);
                Ok(())
            }
            None if self.dequant.read(self.inner, index, offset, dst)? => Ok(()),
            None => self.inner.read_into(index, offset, dst),
        }
    }
    fn unconverted(&self) -> Vec<(String, String)> {
        self.inner.unconverted()
    }
    fn access(&self, index: usize) -> Access {
        match self.own(index) {
            Some(_) => Access::Mapped,
            None => self.inner.access(index),
        }
    }
    fn release(&self, index: usize, offset: u64, len: u64) {
        if self.own(index).is_none() {
            let (o, l) = self
                .dequant
                .stored(index, offset, len)
                .unwrap_or((offset, len));
            self.inner.release(index, o, l)
        }
    }
    fn will_need(&self, index: usize, offset: u64, len: u64) {
        if self.own(index).is_none() {
            let (o, l) = self
                .dequant
                .stored(index, offset, len)
                .unwrap_or((offset, len));
            self.inner.will_need(index, o, l)
        }
    }
}

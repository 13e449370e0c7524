//! Sources held under readers' locks: the one place the registry meets in-place edits
//! (weightport-edit). Each file of an opened source is settled (a killed edit's journal rolled
//! back, with a notice the CLI prints) and then locked shared until the source is dropped, so an
//! edit never changes bytes a conversion, diff or slice is reading.

use std::path::PathBuf;

use weightport_core::{Access, Format, Metadata, Result, TensorInfo, TensorSource};
use weightport_edit::ReadGuard;

/// `src`, with every one of its files settled and read-locked (see the module docs).
pub(crate) fn guard(src: Box<dyn TensorSource>) -> Result<Box<dyn TensorSource>> {
    let guards = src
        .files()
        .iter()
        .map(|f| weightport_edit::settle(f))
        .collect::<Result<Vec<_>>>()?;
    Ok(Box::new(Guarded {
        src,
        _guards: guards,
    }))
}

/// A source and the read locks of its files.
struct Guarded {
    src: Box<dyn TensorSource>,
    _guards: Vec<ReadGuard>,
}

impl TensorSource for Guarded {
    fn format(&self) -> Format {
        self.src.format()
    }
    fn metadata(&self) -> &Metadata {
        self.src.metadata()
    }
    fn tensors(&self) -> &[TensorInfo] {
        self.src.tensors()
    }
    fn files(&self) -> Vec<PathBuf> {
        self.src.files()
    }
    fn file_of(&self, index: usize) -> PathBuf {
        self.src.file_of(index)
    }
    fn bytes(&self, index: usize) -> Option<&[u8]> {
        self.src.bytes(index)
    }
    fn read_into(&self, index: usize, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.src.read_into(index, offset, dst)
    }
    fn access(&self, index: usize) -> Access {
        self.src.access(index)
    }
    fn unconverted(&self) -> Vec<(String, String)> {
        self.src.unconverted()
    }
    fn release(&self, index: usize, offset: u64, len: u64) {
        self.src.release(index, offset, len)
    }
    fn will_need(&self, index: usize, offset: u64, len: u64) {
        self.src.will_need(index, offset, len)
    }
}

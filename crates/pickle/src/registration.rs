//! The PyTorch formats in the pipeline's registry (`weightport_core::registry`). Both open
//! through [`crate::open`], which dispatches on the content; list [`LEGACY`] before
//! safetensors (its probe claims raw pickles so they are refused, not reported unknown).

use weightport_core::registry::InputFormat;
use weightport_core::Format;

use crate::{open_source, probe_legacy, probe_zip_source};

/// torch ZIP checkpoints (`torch.save` since 1.6).
pub const ZIP: InputFormat = InputFormat {
    name: "pytorch",
    format: Format::PytorchZip,
    probe: probe_zip_source,
    open: open_source,
};

/// Legacy stacked-pickle checkpoints (and raw pickles / the tar format, which it refuses).
pub const LEGACY: InputFormat = InputFormat {
    name: "pytorch-legacy",
    format: Format::PytorchLegacy,
    probe: |src, head| probe_legacy(src.name(), head),
    open: open_source,
};

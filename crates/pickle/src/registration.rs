//! The PyTorch formats in the pipeline's registry (`weightport_core::registry`). Both open
//! through [`crate::open`], which dispatches on the content; list [`LEGACY`] before
//! safetensors (its probe claims raw pickles so they are refused, not reported unknown).

use weightport_core::registry::InputFormat;
use weightport_core::Format;

use crate::{open, probe_legacy, probe_zip};

/// torch ZIP checkpoints (`torch.save` since 1.6).
pub const ZIP: InputFormat = InputFormat {
    name: "pytorch",
    format: Format::PytorchZip,
    probe: probe_zip,
    open,
};

/// Legacy stacked-pickle checkpoints (and raw pickles / the tar format, which it refuses).
pub const LEGACY: InputFormat = InputFormat {
    name: "pytorch-legacy",
    format: Format::PytorchLegacy,
    probe: probe_legacy,
    open,
};

//! The options a message may point the reader to, spelled by the front end.
//!
//! A library message that tells the reader what to do ("pass `force` to replace it") names the
//! option as a [`Knob`], never as a command-line flag: the library does not know how its front
//! end spells its options. A front end installs its spelling once per process with
//! [`spell_knobs_with`] (the CLI spells [`Knob::Force`] `--force`); until then a knob is shown
//! as the name of the option field that sets it, in backticks. The set of knobs is closed (no
//! `#[non_exhaustive]`), so a front end's spelling table is checked for completeness by the
//! compiler.

use std::fmt;
use std::sync::OnceLock;

/// An option (or a command) a message refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Knob {
    /// Replace an existing output.
    Force,
    /// The output format.
    To,
    /// The input format.
    From,
    /// Tensor renaming rules.
    Rename,
    /// The output element type.
    Dtype,
    /// Which tensors the element type applies to.
    DtypeFilter,
    /// The quantization type.
    Quant,
    /// Quantize tensors that are already quantized.
    AllowRequantize,
    /// Allow casts that lose range.
    AllowLossy,
    /// The architecture an HF release is converted as.
    Arch,
    /// An importance matrix for the quantizer.
    Imatrix,
    /// The memory budget.
    MaxMemory,
    /// The plan file of conversion units.
    Plan,
    /// The attestation written beside an output.
    Attest,
    /// Read only the tensors a repo's index names.
    IndexOnly,
    /// The key of a checkpoint's dict of tensors.
    Key,
    /// How NumPy `V2` arrays are read.
    Void2As,
    /// The pre-tokenizer of a vocabulary.
    PreTokenizer,
    /// An edit setting elements to a value.
    Set,
    /// An edit masking elements.
    Mask,
    /// An edit adding a value.
    Add,
    /// An edit replacing a tensor's bytes.
    Replace,
    /// An edit applying a delta.
    Apply,
    /// Undoing the last edit.
    Undo,
    /// Keeping the undo journal of an edit.
    KeepUndo,
    /// Recovering an interrupted edit (a command).
    Recover,
    /// Running one conversion unit (a command).
    RunUnit,
    /// The index of a conversion unit.
    Index,
}

impl Knob {
    /// The name of the option field (or function) that sets it: the default spelling.
    pub fn field(self) -> &'static str {
        match self {
            Knob::Force => "force",
            Knob::To => "to",
            Knob::From => "from",
            Knob::Rename => "rename",
            Knob::Dtype => "dtype",
            Knob::DtypeFilter => "dtype_filter",
            Knob::Quant => "quant",
            Knob::AllowRequantize => "allow_requantize",
            Knob::AllowLossy => "allow_lossy",
            Knob::Arch => "arch",
            Knob::Imatrix => "imatrix",
            Knob::MaxMemory => "max_memory",
            Knob::Plan => "plan",
            Knob::Attest => "attest",
            Knob::IndexOnly => "index_only",
            Knob::Key => "key",
            Knob::Void2As => "void2_as",
            Knob::PreTokenizer => "pre_tokenizer",
            Knob::Set => "set",
            Knob::Mask => "mask",
            Knob::Add => "add",
            Knob::Replace => "replace",
            Knob::Apply => "apply",
            Knob::Undo => "undo",
            Knob::KeepUndo => "keep_undo",
            Knob::Recover => "recover",
            Knob::RunUnit => "run_unit",
            Knob::Index => "index",
        }
    }
}

static SPELLING: OnceLock<fn(Knob) -> &'static str> = OnceLock::new();

/// Installs the front end's spelling of every knob for the rest of the process. The first
/// call wins (a process has one front end); returns whether this call's spelling is the one
/// in use.
pub fn spell_knobs_with(spelling: fn(Knob) -> &'static str) -> bool {
    let installed = SPELLING.get_or_init(|| spelling);
    std::ptr::fn_addr_eq(*installed, spelling)
}

impl fmt::Display for Knob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match SPELLING.get() {
            Some(spell) => f.write_str(spell(*self)),
            None => write!(f, "`{}`", self.field()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Knob;

    #[test]
    fn a_knob_without_a_front_end_is_its_field_name() {
        // No test in this crate installs a spelling.
        assert_eq!(Knob::MaxMemory.to_string(), "`max_memory`");
        assert_eq!(
            format!("pass {} to replace it", Knob::Force),
            "pass `force` to replace it"
        );
    }
}

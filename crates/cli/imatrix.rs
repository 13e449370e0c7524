//! What `--imatrix` covered, for the summary, the dry run and `--json`: per output tensor
//! whether it is quantized with importance data, the entries that name no output tensor, the
//! quantized tensors without data, and those llama-quantize would refuse to write without it.

use serde_json::{json, Value};
use weightport_engine::importance::coverage;
use weightport_engine::mix::{self, QuantOptions};
use weightport_engine::ConvertReport;

/// The importance-matrix view of a `--quant` conversion.
pub(crate) struct ImatrixView {
    /// Per plan entry: `None` when it is not quantized, else whether it has data.
    pub per_tensor: Vec<Option<bool>>,
    /// The file as given, when there is one.
    pub file: Option<String>,
    /// Entries kept after --include/--exclude-weights.
    pub entries: usize,
    /// Entries that name no output tensor.
    pub unused: Vec<String>,
    /// Quantized tensors without data.
    pub uncovered: Vec<String>,
    /// Quantized tensors llama-quantize will not write without data (a dry run lists them).
    pub required: Vec<String>,
}

/// The view of `r` under `q`; `None` without `--quant`.
pub(crate) fn view(q: Option<&QuantOptions>, r: &ConvertReport) -> Option<ImatrixView> {
    let q = q?;
    let im = q.imatrix.as_deref().filter(|m| !m.weights.is_empty());
    let quantized: Vec<&str> = r
        .plan
        .iter()
        .filter(|t| t.dtype.is_block())
        .map(|t| t.name.as_str())
        .collect();
    let per_tensor = r
        .plan
        .iter()
        .map(|t| {
            t.dtype
                .is_block()
                .then(|| im.is_some_and(|m| m.weights.contains_key(&t.name)))
        })
        .collect();
    let required = r
        .plan
        .iter()
        .filter(|t| mix::requires_imatrix(&t.name, t.dtype, q.ftype))
        .filter(|t| !im.is_some_and(|m| m.weights.contains_key(&t.name)))
        .map(|t| t.name.clone())
        .collect();
    let cov = im.map(|m| coverage(m, r.plan.iter().map(|t| t.name.as_str()), quantized));
    let cov = cov.unwrap_or_default();
    Some(ImatrixView {
        per_tensor,
        file: q.imatrix.as_ref().map(|m| m.file.clone()),
        entries: im.map_or(0, |m| m.weights.len()),
        unused: cov.unused,
        uncovered: cov.uncovered,
        required,
    })
}

/// Bits per weight of a plan entry.
pub(crate) fn bpw(bytes: u64, shape: &[u64]) -> f64 {
    let n: u64 = shape.iter().product();
    if n == 0 {
        0.0
    } else {
        bytes as f64 * 8.0 / n as f64
    }
}

impl ImatrixView {
    /// The `--json` document's `imatrix` member.
    pub(crate) fn json(&self) -> Value {
        json!({
            "file": self.file,
            "entries": self.entries,
            "unused_entries": self.unused,
            "without_data": self.uncovered,
            "requires_imatrix": self.required,
        })
    }

    /// Warning lines for the text summary.
    pub(crate) fn lines(&self, dry_run: bool) -> Vec<String> {
        let mut v = Vec::new();
        let list = |xs: &[String]| {
            let shown: Vec<&str> = xs.iter().take(8).map(String::as_str).collect();
            let more = xs.len().saturating_sub(8);
            let tail = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            format!("{}{tail}", shown.join(", "))
        };
        if let Some(f) = &self.file {
            v.push(format!("importance matrix {f}: {} entries", self.entries));
            if !self.unused.is_empty() {
                v.push(format!(
                    "warning: {} importance matrix entries name no tensor of the output: {}",
                    self.unused.len(),
                    list(&self.unused)
                ));
            }
            if !self.uncovered.is_empty() {
                v.push(format!(
                    "{} quantized tensors have no importance data: {}",
                    self.uncovered.len(),
                    list(&self.uncovered)
                ));
            }
        }
        if dry_run && !self.required.is_empty() {
            v.push(format!(
                "warning: writing this quantization will require an importance matrix \
                 (llama-quantize refuses {} without one)",
                list(&self.required)
            ));
        }
        v
    }
}

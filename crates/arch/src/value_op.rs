//! Value transforms the reference applies to a tensor before writing it (a leaf: the planner
//! and the family rules that choose them both import it).

/// Multiplications of a band of rows by factors, one after another.
#[derive(Debug, Clone, PartialEq)]
pub struct RowScale {
    /// The rows (outermost axis).
    pub rows: std::ops::Range<u64>,
    /// The factors (config.json's numbers): each rounded to f32 and multiplied in, the result
    /// rounded to the tensor's type each time, as torch's `tensor * python_float` does.
    pub factors: Vec<f64>,
}

/// A value transform the reference applies to a tensor before writing it.
#[derive(Debug, Clone, PartialEq)]
pub enum ValueOp {
    /// `1 + w` (Gemma's norms, [`crate::table::ArchSpec::norm_plus_one`]).
    PlusOne,
    /// `-exp(w)` (the SSM families' `A = -exp(A_log)`, [`crate::table::SplitRule::SsmA`]),
    /// with torch's float32 exp.
    NegExp,
    /// Scaled rows (Falcon-H1's multipliers, [`crate::ssm::falcon_h1_scale`]); rows in no band
    /// are kept.
    Scale(Vec<RowScale>),
}

//! weightport-units: one conversion spread over the batch engine a user already runs (Slurm
//! arrays, Kubernetes Indexed Jobs, CI matrices, `xargs -P`), on the engine's job protocol
//! (`weightport_engine::plan`, `Job::execute`, `Job::prepare`/`verify`/`commit`): it plans,
//! executes and commits through that protocol only, so a unit writes the bytes `convert` would.
//!
//! ```text
//! plan:   the job as `convert` plans it ─ split its output tensors into N units
//!         (whole output files where there are enough of them, else tensor ranges, balanced
//!         by bytes read + written) ─ the plan file: command, inputs' identities, output
//!         files, tensors, each unit's tensors and the input ranges it reads
//! unit I: inputs unchanged? ─ the same job again (its fingerprint must match) ─ run only
//!         unit I's tensors into a temp part in the staging directory ─ re-read and hash it
//!         ─ rename the part, then publish the completion record with RENAME_NOREPLACE
//! finish: every record there and its part's sha256 right ─ the output written from the parts
//!         by the format's own sink ─ verified ─ committed by `convert`'s transaction
//! ```
//! The staging directory is `.NAME.wp-units` beside the output: nothing of the output is
//! visible before `finish` commits. A unit's output bytes do not depend on which process
//! computes them (the executor is deterministic per chunk), so two processes racing on one
//! unit publish identical parts and only one completion record.

#![deny(missing_docs)]

mod balance;
mod finish;
mod in_place;
mod job;
mod layout;
mod planfile;
mod unit;

pub use balance::UnitSplit;
pub use finish::{finish, FinishReport};
#[doc(hidden)]
pub use planfile::{check_indices, doc_sha256};
pub use planfile::{
    parse_plan, plan_units, read_plan, set_remote_inputs, PlannedUnits, RemoteInputs, UnitPlan,
    PLAN_VERSION,
};
pub use unit::{run_unit, UnitOutcome, UnitReport};

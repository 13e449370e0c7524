//! `weightport slice IN 'NAME[SLICE]' -o OUT`: a line, or one JSON document
//! (docs/json/slice.schema.json).

use std::io::Write;

use serde_json::json;
use weightport_core::{sanitize, Error};
use weightport_edit::Selection;

use crate::args::SliceArgs;
use crate::options::open_one;
use crate::render::p;
use crate::Failure;

pub(crate) fn run(a: &SliceArgs, json: bool, out: &mut impl Write) -> Result<(), Failure> {
    let sel = Selection::parse(&a.selection).map_err(Error::Usage)?;
    let input = open_one(&a.input, &a.read)?;
    let s = weightport_edit::slice::slice(input.source.as_ref(), &sel, &a.output, a.force)?;
    let recovered = weightport_edit::notices();
    if json {
        let doc = json!({
            "ok": true,
            "command": "slice",
            "output": s.path.display().to_string(),
            "tensor": s.tensor,
            "selection": a.selection,
            "dtype": s.dtype.name(),
            "shape": s.shape,
            "bytes_read": s.read,
            "bytes": s.bytes,
            "recovered": recovered,
        });
        writeln!(out, "{doc}")?;
    } else {
        writeln!(
            out,
            "{}: {} {} {:?} ({} bytes of the input read)",
            p(&s.path),
            sanitize(&a.selection),
            s.dtype.name(),
            s.shape,
            s.read
        )?;
    }
    Ok(())
}

//! `--report FILE.html`: the quality report of a conversion as one static page (a table of
//! every quantized or narrowed tensor and a per-layer chart of the relative error as inline
//! SVG; no script, no style sheet or font from the network).

use std::collections::BTreeMap;
use std::fmt::Write;

use weightport_engine::ConvertReport;
use weightport_engine::TransformReport;

fn esc(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '&' => "&amp;".into(),
            '<' => "&lt;".into(),
            '>' => "&gt;".into(),
            '"' => "&quot;".into(),
            '\'' => "&#39;".into(),
            c if c.is_control() => "\u{fffd}".into(),
            c => c.to_string(),
        })
        .collect()
}

/// The layer a tensor belongs to (`blk.3.…`, `model.layers.3.…`), if its name says.
pub(crate) fn layer_of(name: &str) -> Option<u64> {
    let parts: Vec<&str> = name.split('.').collect();
    parts.windows(2).find_map(|w| {
        matches!(w[0], "blk" | "layers" | "layer" | "h" | "block" | "blocks")
            .then(|| w[1].parse().ok())
            .flatten()
    })
}

/// Per layer: (mean relative error, max relative error, tensors).
fn per_layer(rows: &[&TransformReport]) -> BTreeMap<u64, (f64, f64, usize)> {
    let mut m: BTreeMap<u64, (f64, f64, usize)> = BTreeMap::new();
    for t in rows {
        let (Some(l), Some(q)) = (layer_of(&t.tensor), t.quality) else {
            continue;
        };
        let e = m.entry(l).or_default();
        e.0 += q.relative;
        e.1 = e.1.max(q.relative);
        e.2 += 1;
    }
    for v in m.values_mut() {
        v.0 /= v.2 as f64;
    }
    m
}

fn chart(layers: &BTreeMap<u64, (f64, f64, usize)>) -> String {
    if layers.is_empty() {
        return "<p>No tensor names a layer (<code>blk.N.</code>, <code>layers.N.</code>).</p>"
            .into();
    }
    let (w, h, pad) = (640.0, 240.0, 40.0);
    let top = layers.values().map(|v| v.1).fold(0f64, f64::max).max(1e-12);
    let bw = (w - 2.0 * pad) / layers.len() as f64;
    let mut s = format!(
        "<svg id=\"layer-chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         role=\"img\" aria-label=\"relative error per layer\">\
         <line x1=\"{pad}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#333\"/>\
         <text x=\"4\" y=\"{pad}\" font-size=\"11\">{top:.2e}</text>\
         <text x=\"4\" y=\"{b}\" font-size=\"11\">0</text>",
        b = h - pad,
        r = w - pad
    );
    for (i, (l, (mean, max, n))) in layers.iter().enumerate() {
        let x = pad + i as f64 * bw;
        let mh = mean / top * (h - 2.0 * pad);
        let xh = max / top * (h - 2.0 * pad);
        let _ = write!(
            s,
            "<g class=\"layer\" data-layer=\"{l}\"><title>layer {l}: mean relative error {mean:.3e}, \
             max {max:.3e} over {n} tensors</title>\
             <rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{bw1:.1}\" height=\"{mh:.1}\" fill=\"#4a7ebb\"/>\
             <line x1=\"{x:.1}\" y1=\"{my:.1}\" x2=\"{x2:.1}\" y2=\"{my:.1}\" stroke=\"#c0392b\" stroke-width=\"2\"/>\
             <text x=\"{tx:.1}\" y=\"{ty:.1}\" font-size=\"10\" text-anchor=\"middle\">{l}</text></g>",
            y = h - pad - mh,
            bw1 = (bw * 0.8).max(1.0),
            my = h - pad - xh,
            x2 = x + (bw * 0.8).max(1.0),
            tx = x + bw * 0.4,
            ty = h - pad + 14.0,
        );
    }
    s.push_str(
        "</svg><p>Bars: mean relative error of the layer's tensors; red marks: the largest.</p>",
    );
    s
}

/// A cell of an importance-weighted figure (empty without `--imatrix` data).
fn weighted_cell(v: Option<f64>) -> String {
    match v {
        Some(v) => format!("<td data-v=\"{v:e}\">{v:.3e}</td>"),
        None => "<td data-v=\"-1\">–</td>".to_string(),
    }
}

fn table(rows: &[&TransformReport]) -> String {
    let mut s = String::from(
        "<table id=\"quality\"><thead><tr><th>tensor</th><th>operation</th><th>values</th>\
         <th>RMSE</th><th>max abs error</th><th>relative error</th><th>clipped</th>\
         <th>importance-weighted RMSE</th><th>importance-weighted max abs error</th></tr></thead><tbody>",
    );
    for t in rows {
        let Some(q) = t.quality else { continue };
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td data-v=\"{:e}\">{:.3e}</td><td data-v=\"{:e}\">{:.3e}</td>\
             <td data-v=\"{:e}\">{:.3e}</td><td data-v=\"{:e}\">{:.3}%</td>{}{}</tr>",
            esc(&t.tensor),
            esc(&t.op),
            q.values,
            q.rmse,
            q.rmse,
            q.max_abs,
            q.max_abs,
            q.relative,
            q.relative,
            q.clipped,
            q.clipped * 100.0,
            weighted_cell(q.weighted_rmse),
            weighted_cell(q.weighted_max_abs)
        );
    }
    s.push_str("</tbody></table>");
    s
}

/// The page.
pub(crate) fn html(r: &ConvertReport) -> String {
    let rows: Vec<&TransformReport> = r
        .transforms
        .iter()
        .filter(|t| t.quality.is_some())
        .collect();
    let outputs: Vec<String> = r
        .files
        .iter()
        .map(|f| esc(&f.path.display().to_string()))
        .collect();
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>weightport quality report</title>\
         <style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #bbb;padding:2px 6px;text-align:right}}td:first-child,th:first-child{{text-align:left}}</style>\
         </head><body><h1>Quality report</h1>\
         <p>Output: {}. {} of {} tensors quantized or narrowed; errors against the source values \
         (RMSE, largest absolute error, ‖x−y‖/‖x‖, share of values outside their block's range or \
         overflowed).</p><h2>Relative error per layer</h2>{}<h2>Tensors</h2>{}</body></html>\n",
        outputs.join(", "),
        rows.len(),
        r.tensors,
        chart(&per_layer(&rows)),
        table(&rows)
    )
}

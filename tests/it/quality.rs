//! The quality report (issue 17 item 4): `--json`'s per-tensor figures equal numpy's
//! computation from the source and the written file (a GGUF dequantized by gguf-py, F16/BF16
//! safetensors decoded by numpy: tests/quality_check.py), and `--report FILE.html` is a static
//! page a real headless Chromium renders with its table and per-layer chart.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{fixtures, wp};

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// `WEIGHTPORT_PYTHON` (else `python3`) if it has numpy, safetensors and gguf; outside CI a
/// missing one is a printed skip.
fn python() -> Option<String> {
    let py = std::env::var("WEIGHTPORT_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py)
        .args(["-c", "import numpy, safetensors, gguf"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI's python must have numpy, safetensors, gguf"
        );
        eprintln!("SKIPPED numpy quality check: {py} lacks numpy/safetensors/gguf");
    }
    ok.then_some(py)
}

#[test]
fn figures_equal_numpy_on_the_written_files() {
    let Some(py) = python() else { return };
    let t = tempfile::tempdir().unwrap();
    let src = fixtures().join("good/quality/model.safetensors");
    let runs: Vec<(String, Vec<&str>)> = vec![
        ("q8.gguf".into(), vec!["--quant", "Q8_0"]),
        ("q4km.gguf".into(), vec!["--quant", "Q4_K_M"]),
        ("q4_0.gguf".into(), vec!["--quant", "Q4_0", "--pure"]),
        ("q2k.gguf".into(), vec!["--quant", "Q2_K"]),
        ("f16.safetensors".into(), vec!["--dtype", "f16"]),
        ("bf16.safetensors".into(), vec!["--dtype", "bf16"]),
    ];
    for (name, extra) in runs {
        let out = t.path().join(&name);
        let mut args = vec!["--json", "convert"];
        let (srcs, outs) = (s(&src), s(&out));
        args.extend([srcs.as_str(), "-o", outs.as_str()]);
        args.extend(extra);
        let o = wp(&args);
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let measured = doc["transforms"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| !t["quality"].is_null())
            .count();
        assert!(measured >= 5, "{name}: {measured} tensors with figures");
        let rep = t.path().join(format!("{name}.json"));
        std::fs::write(&rep, &o.stdout).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/quality_check.py");
        let c = Command::new(&py)
            .arg(script)
            .arg(&src)
            .arg(&out)
            .arg(&rep)
            .output()
            .unwrap();
        assert!(
            c.status.success(),
            "{name}: numpy disagrees:\n{}{}",
            String::from_utf8_lossy(&c.stdout),
            String::from_utf8_lossy(&c.stderr)
        );
        // What the fixture was built to show: F16 overflows the values beyond 65504; the
        // 4-bit grids clip outliers; Q8_0 keeps the relative error under 1%.
        let wide = doc["transforms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tensor"] == "model.wide.weight")
            .unwrap();
        let q = &wide["quality"];
        match name.as_str() {
            "f16.safetensors" => assert_eq!(
                q["clipped_share"].as_f64(),
                Some(3.0 / 2048.0),
                "70000, -1e6 and 65520 overflow"
            ),
            "q8.gguf" => assert!(q["relative_error"].as_f64().unwrap() < 0.01),
            "q4_0.gguf" => assert!(q["clipped_share"].as_f64().unwrap() > 0.0),
            _ => {}
        }
    }
}

/// A Chromium to render with: `WEIGHTPORT_CHROMIUM`, else one on PATH. CI installs Debian's
/// (`.ci/run`) and says why in `WEIGHTPORT_NO_CHROMIUM` when it cannot.
fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("WEIGHTPORT_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if found.is_none() {
        let why = std::env::var("WEIGHTPORT_NO_CHROMIUM").ok();
        assert!(
            std::env::var_os("CI").is_none() || why.is_some(),
            "CI must install chromium or say why it could not (WEIGHTPORT_NO_CHROMIUM)"
        );
        eprintln!(
            "SKIPPED the HTML report in a browser: {}",
            why.unwrap_or_else(|| "no chromium on PATH (apt-get install chromium)".into())
        );
    }
    found.map(PathBuf::from)
}

#[test]
fn the_html_report_renders_in_headless_chromium() {
    let t = tempfile::tempdir().unwrap();
    let src = fixtures().join("good/quality/model.safetensors");
    let page = t.path().join("quality.html");
    let o = wp(&[
        "convert",
        &s(&src),
        "-o",
        &s(&t.path().join("m.gguf")),
        "--quant",
        "Q4_K_M",
        "--report",
        &s(&page),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    // Static: nothing to fetch (the SVG namespace is a name, not a request).
    for needle in ["<script", "src=", "href=", "@import", "url("] {
        assert!(!html.contains(needle), "the page loads something: {needle}");
    }
    let Some(browser) = chromium() else { return };
    let profile = t.path().join("profile");
    let run = |extra: &[String]| {
        Command::new(&browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(extra)
            .arg(format!("file://{}", page.display()))
            .output()
            .expect("run chromium")
    };
    let dom = run(&["--dump-dom".into()]);
    let dom = String::from_utf8_lossy(&dom.stdout).to_string();
    // The browser's DOM: the table with one row per quantized tensor (4 layers' mlp weights and
    // the wide tensor; norms stay F32), and the chart with one bar per layer.
    assert_eq!(dom.matches("<tr><td>").count(), 5, "{dom}");
    assert_eq!(dom.matches("class=\"layer\"").count(), 4, "{dom}");
    assert!(dom.contains("<svg id=\"layer-chart\""), "{dom}");
    assert!(
        dom.contains("model.layers.3.mlp.weight</td><td>F32→Q4_K</td>"),
        "{dom}"
    );
    let shot = t.path().join("shot.png");
    let o = run(&[
        format!("--screenshot={}", shot.display()),
        "--window-size=900,1000".into(),
    ]);
    let png = std::fs::read(&shot)
        .unwrap_or_else(|_| panic!("no screenshot: {}", String::from_utf8_lossy(&o.stderr)));
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "a rendered page"
    );
}

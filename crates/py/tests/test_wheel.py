"""The installed wheel: the Python API and the `weightport` command it puts on PATH.

Run with the venv the wheel was installed into (`.ci/run` does), from any directory but the
package source, so `import weightport` is the installed one. References are independent of
weightport: tensor hashes torch wrote (fixtures/expected/pickle), the tensors safetensors-py
saved (fixtures/expected/ckpt), numpy's own float16 cast, the JSON schemas of docs/json, and
the command's own `--json` output for the same arguments.
"""

import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from safetensors.numpy import load_file

import weightport

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "fixtures"
SCHEMAS = ROOT / "docs" / "json"
COMMAND = Path(sys.executable).parent / "weightport"
HOSTILE = FIX / "hostile" / "pickle" / "01_rce_global_os_system.pt"


def schema(command):
    return json.loads((SCHEMAS / f"{command}.schema.json").read_text())


def cli(*args):
    """The installed command with --json: (exit code, document)."""
    p = subprocess.run([str(COMMAND), "--json", *map(str, args)], capture_output=True, text=True)
    return p.returncode, json.loads(p.stdout)


def torch_hashes(name):
    """name → (dtype, shape, sha256 of the row-major little-endian bytes), as torch.load gave."""
    ref = json.loads((FIX / "expected" / "pickle" / f"{name}.json").read_text())
    return {t["name"]: (t["dtype"], t["shape"], t["sha256"]) for t in ref["tensors"]}


def without_timing(doc):
    """What the machine changes between two runs: the time taken, the free disk space."""
    return {k: v for k, v in doc.items() if k not in ("seconds", "free_bytes")}


def test_the_installed_wheel_is_tested():
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert Path(weightport.__file__).resolve().is_relative_to(site), weightport.__file__
    assert COMMAND.is_file(), "the wheel did not install the weightport command"


def test_convert_api_matches_torch(tmp_path):
    out = tmp_path / "m.safetensors"
    doc = weightport.convert(FIX / "good" / "pickle" / "module_state_dict.pt", out)
    jsonschema.validate(doc, schema("convert"))
    assert doc["ok"] and doc["verified"] and doc["input_format"] == "pytorch-zip"
    tensors = load_file(str(out))
    ref = torch_hashes("module_state_dict")
    assert set(tensors) == set(ref)
    for name, array in tensors.items():
        dtype, shape, sha = ref[name]
        assert (str(array.dtype), list(array.shape)) == (dtype, shape), name
        assert hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest() == sha, name


def test_convert_api_and_command_give_the_same_document(tmp_path):
    src = FIX / "good" / "pickle" / "module_state_dict.pt"
    a = weightport.convert([src], tmp_path / "a.safetensors", dtype="f16", dry_run=True)
    code, b = cli("convert", src, "-o", tmp_path / "a.safetensors", "--dtype", "f16", "--dry-run")
    assert code == 0
    assert without_timing(a) == without_timing(b)


def test_convert_options_are_the_flags(tmp_path):
    # dtype, dtype_filter, rename (a list: the flag repeated), force: numpy's own cast is the
    # reference for the f16 values.
    src = FIX / "expected" / "ckpt" / "train.safetensors"
    out = tmp_path / "r.safetensors"
    out.write_bytes(b"old")
    doc = weightport.convert(
        src,
        out,
        dtype="f16",
        dtype_filter="weight",
        rename=["s/^/model./", "s/^model\\.0\\./model.first./"],
        force=True,
    )
    assert doc["ok"]
    ref = load_file(str(src))
    got = load_file(str(out))
    renamed = {re.sub(r"^model\.0\.", "model.first.", "model." + k): v for k, v in ref.items()}
    assert "model.first.weight" in renamed
    assert set(got) == set(renamed)
    for name, array in renamed.items():
        want = array.astype(np.float16) if "weight" in name and array.dtype.kind == "f" else array
        assert got[name].dtype == want.dtype and np.array_equal(got[name], want), name


def test_inspect_and_verify(tmp_path):
    src = FIX / "good" / "pickle" / "module_state_dict.pt"
    doc = weightport.inspect(src)
    jsonschema.validate(doc, schema("inspect"))
    ref = torch_hashes("module_state_dict")
    assert {t["name"]: t["shape"] for t in doc["tensors"]} == {n: r[1] for n, r in ref.items()}
    assert doc == cli("inspect", src)[1]

    out = tmp_path / "m.safetensors"
    weightport.convert(src, out)
    same = weightport.verify(out, against=src)
    jsonschema.validate(same, schema("verify"))
    assert same["ok"] and same["differences"] == []
    other = FIX / "good" / "pickle" / "proto4.pt"
    diff = weightport.verify(out, against=other)
    assert diff["ok"] is False and diff["differences"], diff
    code, by_command = cli("verify", out, "--against", other)
    assert code == 1 and by_command == diff


def test_scan_returns_findings_as_the_command_prints_them():
    doc = weightport.scan(HOSTILE)
    jsonschema.validate(doc, schema("scan"))
    assert doc["ok"] is False and doc["unsafe"] == 1
    assert any(g["module"] == "os" and g["name"] == "system" for g in doc["files"][0]["globals"])
    code, by_command = cli("scan", HOSTILE)
    assert code == 3 and by_command == doc
    good = weightport.scan(FIX / "good" / "scan")
    assert good["ok"] and good["unsafe"] == 0 and len(good["files"]) > 5


@pytest.mark.parametrize(
    "call, exc, code, kind",
    [
        (lambda t: weightport.convert(t / "missing.pt", t / "o.safetensors"), weightport.FailedError, 1, "io"),
        (lambda t: weightport.convert(HOSTILE, t / "o.safetensors"), weightport.RefusedError, 3, "refused"),
        (lambda t: weightport.convert(HOSTILE, t / "o.safetensors", no_such_flag=1), weightport.UsageError, 2, "usage"),
        (lambda t: weightport.convert(HOSTILE, t / "o.safetensors", threads=0), weightport.UsageError, 2, "usage"),
        (lambda t: weightport.inspect(FIX / "bad" / "safetensors" / "header_len_past_eof.safetensors"), weightport.FailedError, 1, "malformed"),
    ],
)
def test_errors_are_typed_by_exit_code(tmp_path, call, exc, code, kind):
    with pytest.raises(exc) as info:
        call(tmp_path)
    e = info.value
    jsonschema.validate(e.document, schema("error"))
    assert e.exit_code == e.document["error"]["exit_code"] and str(e) == e.message
    if code is not None:
        assert (e.exit_code, e.kind) == (code, kind)
    assert not list(tmp_path.glob("o.safetensors*")), "a failed conversion left files"


def test_error_document_equals_the_commands():
    with pytest.raises(weightport.RefusedError) as info:
        weightport.inspect(HOSTILE)
    code, doc = cli("inspect", HOSTILE)
    assert code == 3 and doc == info.value.document


@pytest.fixture(scope="module")
def big_npy(tmp_path_factory):
    """128 Mi float32 (512 MiB): a conversion long enough (about a second) to watch as it runs."""
    path = tmp_path_factory.mktemp("big") / "big.npy"
    np.save(path, np.arange(128 << 20, dtype=np.float32))
    return path


def test_progress_drives_a_tqdm_bar(tmp_path, big_npy):
    from tqdm import tqdm  # noqa: F401  (TqdmProgress imports it lazily)

    calls = []
    sink = io.StringIO()
    bar = weightport.TqdmProgress(file=sink, mininterval=0)

    def progress(phase, done, total):
        calls.append((phase, done, total))
        bar(phase, done, total)
        assert bar._bar.n == done and bar._bar.total == total

    with bar:
        doc = weightport.convert(big_npy, tmp_path / "o.safetensors", dtype="f16", progress=progress)
    assert doc["ok"]
    phases = [p for p, _, _ in calls]
    assert "write" in phases and "verify" in phases, calls
    for phase in set(phases):
        seen = [(d, t) for p, d, t in calls if p == phase]
        assert all(0 <= d <= t for d, t in seen)
        assert [d for d, _ in seen] == sorted(d for d, _ in seen), f"{phase} went backwards"
        assert seen[-1][0] == seen[-1][1] > 0, f"{phase} did not end full: {seen}"
    assert "100%" in sink.getvalue()


def test_the_gil_is_released_while_converting(tmp_path, big_npy):
    count = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    seen = []
    t = threading.Thread(target=spin)
    t.start()
    try:
        weightport.convert(big_npy, tmp_path / "o.safetensors", dtype="f16", progress=lambda *a: seen.append(count[0]))
    finally:
        stop.set()
        t.join()
    assert len(seen) >= 3, "the conversion ended too fast to watch"
    # Between the first and last callback the job ran without the GIL: the spinning thread went on.
    assert seen[-1] - seen[0] > 10_000, seen


def test_an_exception_in_the_callback_cancels_the_job(tmp_path, big_npy):
    out = tmp_path / "o.safetensors"

    def progress(phase, done, total):
        raise RuntimeError("stop here")

    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="stop here"):
        weightport.convert(big_npy, out, dtype="f16", progress=progress)
    assert not out.exists() and os.listdir(tmp_path) == [], os.listdir(tmp_path)
    # The cancellation was cleared: the next job runs.
    assert weightport.convert(big_npy, out, dtype="f16")["ok"]
    assert time.monotonic() - t0 < 120


def test_ctrl_c_cancels_the_job(tmp_path, big_npy):
    out = tmp_path / "o.safetensors"
    started = threading.Event()

    def interrupt():
        started.wait(60)
        os.kill(os.getpid(), signal.SIGINT)

    # A shell runs background jobs with SIGINT ignored, and Python then keeps it ignored: the
    # test sets Python's own handler, as an interactive session has it.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    killer = threading.Thread(target=interrupt)
    killer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            weightport.convert(big_npy, out, dtype="f16", progress=lambda *a: started.set())
            time.sleep(5)  # the job ended first: the signal still comes, outside the call
    finally:
        started.set()
        killer.join()
        signal.signal(signal.SIGINT, previous)
    assert not out.exists() and os.listdir(tmp_path) == [], os.listdir(tmp_path)


def test_command_convert_and_scan(tmp_path):
    src = FIX / "good" / "ckpt" / "train.pt"
    out = tmp_path / "train.safetensors"
    p = subprocess.run([str(COMMAND), "convert", str(src), "-o", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "verified" in p.stdout
    want = load_file(str(FIX / "expected" / "ckpt" / "train.safetensors"))
    got = load_file(str(out))
    assert set(got) == set(want)
    for name in want:
        assert got[name].dtype == want[name].dtype and np.array_equal(got[name], want[name]), name

    p = subprocess.run([str(COMMAND), "scan", str(HOSTILE)], capture_output=True, text=True)
    assert p.returncode == 3 and "UNSAFE" in p.stdout and "os.system" in p.stdout
    p = subprocess.run([str(COMMAND), "scan", str(src)], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("safe"), p.stdout


def test_command_version_and_usage():
    p = subprocess.run([str(COMMAND), "--version"], capture_output=True, text=True)
    assert p.returncode == 0
    assert p.stdout.startswith(f"weightport {weightport.__version__}\n")
    assert "safetensors" in p.stdout and "gguf" in p.stdout and "build:  release" in p.stdout
    p = subprocess.run([str(COMMAND), "convert"], capture_output=True, text=True)
    assert p.returncode == 2 and "Usage" in p.stderr
    p = subprocess.run([sys.executable, "-m", "weightport", "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and "convert" in p.stdout


def test_glibc_symbol_versions_stay_at_2_17():
    """manylinux2014: the extension module (the command's code too) needs glibc 2.17 at most."""
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.fail("objdump (binutils) is needed for this check")
    module = Path(weightport._native.__file__)
    text = subprocess.run([objdump, "-T", str(module)], capture_output=True, text=True, check=True).stdout
    versions = {tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_([0-9.]+)", text)}
    assert versions, text[:2000]
    newest = max(versions)
    print(f"glibc symbol versions needed by {module.name}: newest GLIBC_{'.'.join(map(str, newest))}")
    assert newest <= (2, 17), sorted(versions)

"""weightport: move model weights between formats safely and fast.

Each function runs the ``weightport`` command of the same name in this process and returns the
document that command prints with ``--json``, as a dict (the schemas are docs/json/*.schema.json
in the source tree). Options are the command's flags with ``_`` for ``-``::

    weightport.convert(["model.bin"], "model.safetensors", dtype="f16", force=True)
    weightport.convert("release/", "out.gguf", quant="Q4_K_M", tensor_type=["attn_v=Q8_0"])
    weightport.inspect("model.safetensors")
    weightport.verify("out/", against="model.bin")
    weightport.scan("downloads/")

``True`` gives a flag, ``False``/``None`` leaves it out, a list repeats it. A failure raises a
:class:`WeightportError` subclass carrying the command's exit code: :class:`FailedError` (1:
I/O, malformed input), :class:`UsageError` (2), :class:`RefusedError` (3: the safety policy or a
limit). Findings are not failures: ``verify`` with differences and ``scan`` of an unsafe file
return their document with ``"ok": False``, as the command prints it (and exits 1 or 3).

The work runs without the GIL. ``progress=callable(phase, done, total)`` is called on the
calling thread about every 0.1 s while a phase runs and once as it ends (bytes);
:class:`TqdmProgress` draws tqdm bars from it. Ctrl-C (KeyboardInterrupt) or an exception raised
by the callback stops the job as a signal stops the command: temp files removed, nothing
published; then it is raised.
"""

import json
import os
from typing import Any, Callable, Dict, Iterable, List, Optional, Union

from . import _native

__version__: str = _native.__version__

__all__ = [
    "convert",
    "inspect",
    "verify",
    "scan",
    "WeightportError",
    "FailedError",
    "UsageError",
    "RefusedError",
    "TqdmProgress",
]

PathLike = Union[str, "os.PathLike[str]"]
ProgressCallback = Callable[[str, int, int], Any]


class WeightportError(Exception):
    """A command failed. ``exit_code`` is the command's exit code, ``kind`` the error kind
    (``io``, ``malformed``, ``usage``, ``refused``, …), ``message`` its text and ``document``
    the ``--json`` error document."""

    exit_code: int = 1

    def __init__(self, document: Dict[str, Any]):
        error = document["error"]
        super().__init__(error["message"])
        self.document = document
        self.kind: str = error["kind"]
        self.message: str = error["message"]
        self.exit_code = error["exit_code"]


class FailedError(WeightportError):
    """Exit code 1: I/O error, malformed or unsupported input, failed verification, a bug."""


class UsageError(WeightportError, ValueError):
    """Exit code 2: an unknown option, a bad value, an impossible combination."""


class RefusedError(WeightportError):
    """Exit code 3: refused by the safety policy (code in a pickle) or a limit."""


_BY_EXIT_CODE = {1: FailedError, 2: UsageError, 3: RefusedError}


def _arg(value: Any) -> str:
    if isinstance(value, (str, os.PathLike)):
        return os.fsdecode(os.fspath(value))
    if isinstance(value, (int, float)):
        return str(value)
    raise TypeError(f"expected a string, a path or a number, got {type(value).__name__}")


def _options(options: Dict[str, Any]) -> List[str]:
    argv = []
    for name, value in options.items():
        if name == "json":
            raise TypeError("json: the functions always return the --json document")
        flag = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            argv.extend(f"{flag}={_arg(v)}" for v in value)
        else:
            argv.append(f"{flag}={_arg(value)}")
    return argv


def _run(
    command: str,
    positionals: Iterable[PathLike],
    options: Dict[str, Any],
    progress: Optional[ProgressCallback] = None,
) -> Dict[str, Any]:
    argv = ["weightport", command, *_options(options), "--", *map(_arg, positionals)]
    _code, text = _native.run_json(argv, progress)
    document = json.loads(text)
    if "error" in document:
        raise _BY_EXIT_CODE.get(document["error"]["exit_code"], WeightportError)(document)
    return document


def convert(
    inputs: Union[PathLike, Iterable[PathLike]],
    output: PathLike,
    *,
    progress: Optional[ProgressCallback] = None,
    **options: Any,
) -> Dict[str, Any]:
    """``weightport convert INPUTS -o OUTPUT [options]``: convert, reshard or merge (verified,
    atomic). ``inputs``: a file, an ``*.index.json``, a repo directory, or a list of them."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    return _run("convert", inputs, {"output": output, **options}, progress)


def inspect(input: PathLike, **options: Any) -> Dict[str, Any]:
    """``weightport inspect INPUT [options]``: format, tensors, metadata (headers only)."""
    return _run("inspect", [input], options)


def verify(
    path: PathLike, *, progress: Optional[ProgressCallback] = None, **options: Any
) -> Dict[str, Any]:
    """``weightport verify PATH [--against SOURCE] [options]``: validate and hash every
    tensor; ``"ok"`` is False when ``against`` differs (the list is in ``"differences"``)."""
    return _run("verify", [path], options, progress)


def scan(input: PathLike, **options: Any) -> Dict[str, Any]:
    """``weightport scan INPUT``: audit files that can carry code without running them;
    ``"ok"`` is False when a file is unsafe or could not be read."""
    return _run("scan", [input], options)


class TqdmProgress:
    """A ``progress`` callback drawing one tqdm bar (bytes) per phase::

        with weightport.TqdmProgress() as bar:
            weightport.convert("model.bin", "out.safetensors", progress=bar)

    Keyword arguments go to each ``tqdm`` (``leave``, ``file``, ``disable``, …)."""

    def __init__(self, **tqdm_options: Any):
        self._options = {"unit": "B", "unit_scale": True, "unit_divisor": 1024, **tqdm_options}
        self._bar = None
        self._phase: Optional[str] = None
        self.phases: List[str] = []

    def __call__(self, phase: str, done: int, total: int) -> None:
        if self._bar is None or phase != self._phase or done < self._bar.n:
            from tqdm.auto import tqdm

            self.close()
            self._bar = tqdm(total=total, desc=phase, **self._options)
            self._phase = phase
            self.phases.append(phase)
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "TqdmProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

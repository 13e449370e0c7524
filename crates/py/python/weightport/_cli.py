"""The ``weightport`` command of the wheel: the Rust command line, run in this process."""

import sys

from . import _native


def main() -> None:
    sys.exit(_native.main(["weightport", *sys.argv[1:]]))

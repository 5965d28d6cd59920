"""The `wirebroker` command's entry (`python -m wirebroker` and the installed script).

The broker's modules are imported with Python's cyclic garbage collector off: importing them
allocates tens of thousands of objects that live as long as the process, and the collections
they would set off (≈57 at a start) look only for garbage that imports do not make, ≈9 % of
the instructions of `wirebroker --help` (callgrind). They are then frozen (`gc.freeze`), so
later full collections of a running broker no longer walk them, and collection resumes.
"""

import gc
import sys


def main() -> int:
    gc.disable()
    from wirebroker.cli import main as run_command

    gc.freeze()
    gc.enable()
    return run_command()


if __name__ == "__main__":
    sys.exit(main())

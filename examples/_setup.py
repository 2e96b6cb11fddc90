"""What every example script shares: where it writes, and the plotting check made before any work.

``examples/output/`` holds the committed reference runs; a script writes there only when asked
(``--out examples/output``). By default it writes to ``opendp-sketch-output/`` in the current
directory, so rerunning an example never changes the repository.
"""

from __future__ import annotations

import sys

DEFAULT_OUT = "opendp-sketch-output"


def require_matplotlib() -> None:
    """Stop before any computation when matplotlib is missing (the scripts end with a plot)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        sys.exit(
            "this example plots with matplotlib: pip install 'opendp-sketch[plot]' (nothing was computed)"
        )

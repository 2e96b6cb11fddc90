"""Versions of optional integrations, checked where they are used (never at import)."""

from __future__ import annotations

import polars as pl

__all__ = ["OPENDP_POLARS", "ForgetsCallInput", "opendp_polars_available", "require_opendp_polars"]

#: the one Polars release OpenDP 0.16's Polars integration (LazyFrame Contexts, dp.mbi) accepts
OPENDP_POLARS = "1.36.1"


def opendp_polars_available() -> bool:
    """Whether the installed Polars is the one OpenDP 0.16's Polars integration needs."""
    return pl.__version__ == OPENDP_POLARS


def require_opendp_polars(what: str) -> None:
    """Refuse, naming the fix, when OpenDP's Polars integration cannot work with this Polars.

    The rest of the package works with any Polars 1.30+ or 2.x.
    """
    if not opendp_polars_available():
        raise ValueError(
            f"{what} uses OpenDP 0.16's Polars integration, which needs polars=={OPENDP_POLARS} "
            f"(installed: {pl.__version__}); install it with: pip install 'opendp-sketch[context]' "
            "(everything else in opendp_sketch works with the installed Polars)"
        )


class ForgetsCallInput:
    """Base of the objects a measurement releases (sketches, estimators chained into one).

    OpenDP's ``Measurement.__call__`` records each call on its output, input included, for
    ``dp.serialize``: ``output.__opendp_dict__ = {..., "arg": data}``. A released object would
    then hold (and keep alive) the sensitive table. These objects drop that record.
    """

    def __setattr__(self, name: str, value: object) -> None:
        if name == "__opendp_dict__":
            return
        object.__setattr__(self, name, value)

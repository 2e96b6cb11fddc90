"""Transitional alias: ``check_bounds`` lives in :mod:`opendp_sketch._validate`."""

from ._validate import check_bounds

__all__ = ["check_bounds"]

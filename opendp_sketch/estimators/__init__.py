"""Post-processors: everything here reads a released :class:`~opendp_sketch.Sketch` and public draws."""

from .m2m import M2M

__all__ = ["M2M"]

"""Code repair: ``envfarm/CodeRepair-v0`` (``env.py``) over SWE-bench rows, and the built-in task set
(``builtin.py``, projects in ``builtin/``)."""

from . import predictions as _predictions  # noqa: F401  (registers the eval predictions writer)

"""Code repair: ``envfarm/CodeRepair-v0`` (``env.py``) over SWE-bench rows, and the built-in task set
(``builtin.py``, projects in ``builtin/``)."""

"""Code repair: ``envfarm/CodeRepair-v0`` (``env.py``) over SWE-bench rows, the built-in task set
(``builtin.py``, projects in ``builtin/``), and the SWE-bench predictions its evaluations write
(``predictions.py``)."""

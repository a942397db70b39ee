"""Harbor task folders: ``task.py`` loads them, ``env.py`` is ``envfarm/Harbor-v0``, ``verifier.py``
grades."""

"""CLI sub-apps, one file each (``envfarm <name> ...``); registered in ``envfarm/cli.py``.

Commands only parse options, call library code and render results with rich.
"""

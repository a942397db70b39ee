"""``envfarm dashboard``: a browser view of farm runs, trajectories, training and harness results.

    async with DashboardServer([Path("runs")], port=8050) as srv:   # what `envfarm dashboard` runs
        print(srv.url)

Reading order: ``sources.py`` (what a --run folder holds), ``farm_reader.py`` (spool + live.json, read
incrementally), ``trainer_reader.py``, ``harness_reader.py``, ``server.py`` (JSON, SSE, the page), then
``static/`` (index.html, charts.js, views.js, app.js: vanilla JS and SVG, no network).
"""

from .server import Dashboard, DashboardServer, serve
from .sources import Source, discover

__all__ = ["Dashboard", "DashboardServer", "Source", "discover", "serve"]

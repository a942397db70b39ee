"""envfarm and OpenEnv (the environment protocol of the PyTorch / Hugging Face RL stack), both directions.

- ``server.py``: ``envfarm envs serve --env ID``: any registered env over OpenEnv's WebSocket protocol,
  built on OpenEnv's own server classes; ``adapter.py`` makes the per-session ``Environment`` objects and
  ``types.py`` holds the wire types (OpenEnv ``Action``/``Observation``/``State`` subclasses).
- ``remote.py``: ``--env openenv:URL``: any OpenEnv server as an envfarm env, so the farm, spool, eval and
  trainer play it.
- ``trl.py``: an ``environment_factory`` for TRL's GRPOTrainer over a served env.

Needs the ``openenv`` extra (``pip install 'envfarm[openenv]'``); nothing here is imported by
``import envfarm``.
"""

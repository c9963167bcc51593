"""Rollout: token-exact multi-turn episodes (``env_manager``, ``chat``, ``control``; agent
functions through ``endpoint`` and ``agent_episode``), routing to inference workers
(``router``), the env-worker pool (``hosts``), group bookkeeping (``groups``, ``failures``,
``filters``, ``metrics``) and the ``RolloutScheduler`` (``scheduler``, whose docstring is the
pipeline-facing API; ``service`` builds one from a PipelineConfig). Each module's docstring
holds its contract; env workers are roll/workers/environment.py, trajectories and their
collation roll/data/trajectory.py, the layout docs/architecture.md.
"""

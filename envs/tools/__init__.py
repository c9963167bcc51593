"""Tools for any env: ``roll/Tools-v0`` wraps a registered env and lets the model call tools
(calculator, python, search, or your own) before it answers (docs/tools.md)."""

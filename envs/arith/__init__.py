"""Arithmetic with numbers too large to compute in one's head: the task that needs a calculator
(docs/tools.md, "A task that needs a tool")."""

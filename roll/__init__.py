"""roll: reinforcement learning of large language models, agentic and multi-domain."""

__version__ = "0.1.0"

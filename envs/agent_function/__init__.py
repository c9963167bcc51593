"""Agent functions as rollouts: ``roll/AgentFunction-v0`` runs a plain Python function that
talks to an ``openai`` client against roll's OpenAI-compatible endpoint (docs/tools.md)."""

"""Model helpers: the locally built tiny Qwen-style model kit (`roll-tiny://tiny|small|medium`)."""
from roll.models.tiny import resolve_model_path, save_tiny_model, tiny_model_path

__all__ = ["resolve_model_path", "save_tiny_model", "tiny_model_path"]

"""One small module per supported model family; importing it registers the family with the applier."""

from . import gpt2, llama, mistral

__all__ = ["gpt2", "llama", "mistral"]

"""The version of cachelimit (its own module, so that the command line reads it without importing the package API)."""

__version__ = "0.3.0"

"""Shared helpers for the per-family patches."""

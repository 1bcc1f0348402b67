"""Errors raised by compressors."""

from __future__ import annotations

__all__ = ["PayloadError"]


class PayloadError(ValueError):
    """Bytes or buffers that do not form a valid payload (truncated, oversized or foreign)."""

"""Timestamps as tables print them: kube's ``duration.HumanDuration`` ("5m", "3h2m", "2d")."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def parse_time(text: str) -> datetime:
    """RFC 3339 with a Z or an offset, with or without fractional seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def human_duration(seconds_total: float) -> str:
    """apimachinery's ``HumanDuration``: exact at small ages, coarser as they grow."""
    seconds = int(seconds_total)
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = seconds // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        years = hours // 24 // 365
        return f"{years}y" if days == 0 else f"{years}y{days}d"
    return f"{hours // 24 // 365}y"


def human_age(timestamp: Any, *, now: datetime) -> str:
    """``translateTimestampSince``: "<unknown>" for a missing or unreadable timestamp."""
    if not isinstance(timestamp, str) or not timestamp:
        return "<unknown>"
    try:
        moment = parse_time(timestamp)
    except ValueError:
        return "<invalid>"
    return human_duration((now - moment).total_seconds())

"""Base classes for API models: inputs refuse unknown members, outputs read attributes."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_has_nul(v) for v in value)
    return False


class Input(BaseModel):
    """A request body or query. Text anywhere in it may not hold NUL (U+0000): no
    database column stores it (PostgreSQL refuses it in text and JSONB; SQLite cuts
    the string there), so it is refused up front, naming its member."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        if _has_nul(value):
            raise ValueError("must not contain NUL (U+0000) characters")
        return value


class Output(BaseModel):
    model_config = ConfigDict(from_attributes=True)

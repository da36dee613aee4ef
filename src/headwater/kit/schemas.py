"""Base classes for API models: inputs refuse unknown members, outputs read attributes."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, field_validator

from headwater.kit.strictjson import has_nul


def _json_integer(value: Any) -> Any:
    """An integer as JSON Schema counts one: a number with no fractional part (`19.0`
    included), never a boolean or a string."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a JSON integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("must be a whole number")
        return int(value)
    return value


JSONInt = Annotated[int, BeforeValidator(_json_integer)]


class Input(BaseModel):
    """A request body or query. Text anywhere in it may not hold NUL (U+0000): no
    database column stores it (PostgreSQL refuses it in text and JSONB; SQLite cuts
    the string there), so it is refused up front, naming its member."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        if has_nul(value):
            raise ValueError("must not contain NUL (U+0000) characters")
        return value


class Output(BaseModel):
    model_config = ConfigDict(from_attributes=True)

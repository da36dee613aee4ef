"""Base classes for API models: inputs refuse unknown members, outputs read attributes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Output(BaseModel):
    model_config = ConfigDict(from_attributes=True)

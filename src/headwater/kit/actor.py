"""Who a change is made by and for: the company and the author written on it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Actor:
    company_id: uuid.UUID
    author_id: uuid.UUID

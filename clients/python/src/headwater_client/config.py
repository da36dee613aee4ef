"""Where a client finds its service and credentials: a profile file, then the
environment, whose variables override the profile's values one by one.

    # ~/.config/headwater/profiles.toml (or HEADWATER_PROFILES_FILE)
    [default]
    url = "https://headwater.example.com"
    client_id = "..."
    client_secret = "..."
    audience = "headwater-api"          # optional
    auth_url = "https://auth.example"   # optional; the service itself by default

Environment: HEADWATER_URL, HEADWATER_CLIENT_ID, HEADWATER_CLIENT_SECRET,
HEADWATER_AUDIENCE, HEADWATER_AUTH_URL, HEADWATER_SCOPE; HEADWATER_PROFILE picks the
profile (default `default`).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from headwater_client.errors import ConfigurationError

DEFAULT_AUDIENCE = "headwater-api"
KEYS = ("url", "client_id", "client_secret", "audience", "auth_url", "scope")


def profiles_file(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    if "HEADWATER_PROFILES_FILE" in environ:
        return Path(environ["HEADWATER_PROFILES_FILE"])
    config_home = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home) / "headwater" / "profiles.toml"


@dataclass(frozen=True, slots=True)
class Credentials:
    url: str
    client_id: str
    client_secret: str = field(repr=False)
    audience: str = DEFAULT_AUDIENCE
    auth_url: str | None = None
    scope: str | None = None

    @classmethod
    def load(
        cls, profile: str | None = None, *, environ: Mapping[str, str] | None = None
    ) -> Credentials:
        """Credentials from the profile file and the environment (see the module)."""
        environ = os.environ if environ is None else environ
        chosen = profile or environ.get("HEADWATER_PROFILE")
        name = chosen or "default"
        values = _profile(profiles_file(environ), name, required=bool(chosen))
        for key in KEYS:
            if environ.get(f"HEADWATER_{key.upper()}"):
                values[key] = environ[f"HEADWATER_{key.upper()}"]
        missing = [key for key in ("url", "client_id", "client_secret") if not values.get(key)]
        if missing:
            names = ", ".join(f"HEADWATER_{key.upper()}" for key in missing)
            raise ConfigurationError(
                f"missing {', '.join(missing)}: set {names}, or write them in the "
                f"[{name}] section of {profiles_file(environ)}"
            )
        return cls(
            url=values["url"],
            client_id=values["client_id"],
            client_secret=values["client_secret"],
            audience=values.get("audience") or DEFAULT_AUDIENCE,
            auth_url=values.get("auth_url"),
            scope=values.get("scope"),
        )


def _profile(path: Path, name: str, *, required: bool) -> dict[str, str]:
    if not path.exists():
        if required:
            raise ConfigurationError(f"profile [{name}] asked for, but {path} does not exist")
        return {}
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"{path}: {exc}") from None
    section = document.get(name)
    if section is None:
        if required:
            raise ConfigurationError(f"{path} has no profile [{name}]")
        return {}
    if not isinstance(section, dict):
        raise ConfigurationError(f"{path}: [{name}] is not a table")
    unknown = sorted(set(section) - set(KEYS))
    if unknown:
        raise ConfigurationError(f"{path}: [{name}] has unknown keys {', '.join(unknown)}")
    return {key: str(value) for key, value in section.items()}

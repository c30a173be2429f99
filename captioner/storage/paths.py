"""Where captioner keeps its files (platformdirs), overridable for tests and portable installs.

``CAPTIONER_HOME`` is read once, in ``__main__`` (no environment reads below it): when set, every
directory lives under it (``config/``, ``data/``, ``cache/``, ``logs/``). Tests pass a temporary
folder instead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import platformdirs

__all__ = ["AppPaths", "aside_path"]

APP_NAME = "captioner"


@dataclass(frozen=True, slots=True)
class AppPaths:
    """The four directories of the application.

    Attributes:
        config: settings.json.
        data: model packs (``packs/``) and the session store (``sessions.sqlite3``).
        cache: EP-context caches and optimised graphs, safe to delete.
        logs: rotating log files.
    """

    config: Path
    data: Path
    cache: Path
    logs: Path

    @classmethod
    def default(cls, home: str | Path | None = None) -> AppPaths:
        """The platform's user directories, or subfolders of ``home`` when given."""
        if home:
            root = Path(home)
            return cls(root / "config", root / "data", root / "cache", root / "logs")
        return cls(
            Path(platformdirs.user_config_dir(APP_NAME, appauthor=False)),
            Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)),
            Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False)),
            Path(platformdirs.user_log_dir(APP_NAME, appauthor=False)),
        )

    @property
    def packs(self) -> Path:
        """Directory holding one subdirectory per installed model pack."""
        return self.data / "packs"

    @property
    def sessions_db(self) -> Path:
        """The SQLite session store."""
        return self.data / "sessions.sqlite3"

    @property
    def settings_file(self) -> Path:
        """The settings JSON file."""
        return self.config / "settings.json"

    @property
    def exports(self) -> Path:
        """Default folder for exported transcripts and live subtitle files."""
        return self.data / "transcripts"

    def ensure(self) -> AppPaths:
        """Create the directories (user-only permissions where the OS supports them)."""
        for path in (self.config, self.data, self.cache, self.logs):
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
        return self


def aside_path(path: Path, tag: str = "corrupt") -> Path:
    """A free name beside ``path`` to move a bad file to: ``<name>.<tag>-<UTC stamp>[-n]``.

    Used for corrupt settings and databases, which are kept for the user, never overwritten.
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}.{tag}-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.{tag}-{stamp}-{n}")
    return target

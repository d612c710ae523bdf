"""What to tell a user whose admin call got 401 without a token: the variable, and where the
quickstart wrote it (a newcomer's first ``ferry status`` in a shell without ``ferry.env``)."""

from __future__ import annotations

from pathlib import Path

import app

QUICKSTART_ENV = Path("var/quickstart/ferry.env")  # `ferry quickstart`'s default --data-dir + ENV_FILE


def quickstart_env_files() -> list[Path]:
    """The quickstart's env file under this directory and under the checkout Ferry runs from."""
    roots = [Path.cwd(), Path(app.__file__).resolve().parents[1]]
    found = [(root / QUICKSTART_ENV).resolve() for root in roots if (root / QUICKSTART_ENV).is_file()]
    return list(dict.fromkeys(found))


def missing_token_hint() -> str:
    """One sentence naming FERRY_ADMIN_TOKEN and the file that sets it, when there is one."""
    base = "FERRY_ADMIN_TOKEN is not set (or pass --token)"
    files = quickstart_env_files()
    if files:
        return f"{base}: `ferry quickstart` wrote it to {files[0]}; source it: . {files[0]}"
    return (f"{base}; `ferry quickstart` writes it to <its --data-dir>/ferry.env "
            f"(default ./{QUICKSTART_ENV}): source that file")

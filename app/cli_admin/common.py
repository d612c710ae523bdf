"""What every admin command shares: its options, the HTTP client, parsing and output."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from app.admin_client import AdminClient, AdminError
from app.cli_admin.token_hint import missing_token_hint
from app.domain import units

UrlOpt = Annotated[str, typer.Option("--url", "--endpoint", envvar=["FERRY_URL", "FERRY_ENDPOINT"],
                                     help="Gateway URL (FERRY_URL).")]
TokenOpt = Annotated[str | None, typer.Option("--token", envvar="FERRY_ADMIN_TOKEN",
                                              help="Admin bearer token (FERRY_ADMIN_TOKEN).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
DEFAULT_URL = "http://127.0.0.1:9000"



def make_console(err: bool = False) -> Console:
    """Wide enough when not on a terminal, so piped tables do not wrap ids and keys."""
    console = Console(stderr=err)
    if not console.is_terminal:
        console = Console(stderr=err, width=max(console.width, 160))
    return console


def fail(message: str, code: int = 1) -> NoReturn:
    make_console(err=True).print(f"ferry: {message}", markup=False, highlight=False)
    raise typer.Exit(code)


class Admin(AdminClient):
    """The admin client for the CLI: a refusal becomes a message and an exit code (2 for auth)."""

    def call(self, method: str, path: str, *, params: dict[str, Any] | None = None, body: Any = None,
             timeout: float | None = None) -> Any:
        try:
            return super().call(method, path, params=params, body=body, timeout=timeout)
        except AdminError as exc:
            hint = f"; {missing_token_hint()}" if exc.status == 401 and "Authorization" not in self.client.headers else ""
            fail(f"{exc}{hint}", 2 if exc.status in (0, 401, 403) else 1)


def parse_target(spec: str) -> tuple[str, str]:
    """``s3://bucket/prefix``, ``bucket/prefix`` or ``bucket`` -> (bucket, prefix)."""
    bucket, _, prefix = spec.removeprefix("s3://").partition("/")
    return bucket, prefix


def parse_size(text: str) -> int | None:
    """``100GiB``, ``500M``, ``1024`` (bytes); ``none`` removes a limit (app/domain/units.py)."""
    if text.strip().lower() in ("none", "unlimited", "-"):
        return None
    try:
        return units.parse_size(text)
    except ValueError:
        raise typer.BadParameter(f"not a size: {text!r} (e.g. 500MiB, 10GB, 1048576, none)") from None


def human(n: int | float | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)


def make_table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*["-" if v is None else str(v) for v in row])
    return table


def emit(data: Any, as_json: bool, render: Callable[[Any], Table | str]) -> None:
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    out = render(data)
    if isinstance(out, str):
        typer.echo(out)
    else:
        make_console().print(out)

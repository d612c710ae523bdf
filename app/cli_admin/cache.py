"""``ferry cache sizing``: the miss-ratio curve of ``GET /admin/cache/sizing`` as a table and a
terminal plot (one bar per cache size, the configured budget marked)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from app.cli_admin.common import DEFAULT_URL, Admin, JsonOpt, TokenOpt, UrlOpt, emit, human, make_console, make_table

cache_cli = typer.Typer(help="The read cache: sizing.", no_args_is_help=True)
BAR_WIDTH = 40


def _pct(ratio: float | None) -> str:
    return "-" if ratio is None else f"{100 * ratio:.1f}%"


def plot(points: list[dict[str, Any]], budget: int, width: int = BAR_WIDTH) -> str:
    """Hit ratio against cache size, one line a point: ``#`` bars scaled to 100%, ``<- budget``
    on the configured budget's line."""
    if not points:
        return "no reads recorded yet"
    label = max(len(human(p["cache_bytes"])) for p in points)
    lines = [f"{'cache size':>{label}}  hit ratio (0-100%)"]
    for p in points:
        filled = round(max(0.0, min(1.0, p["hit_ratio"])) * width)
        mark = "  <- budget" if p["cache_bytes"] == budget else ""
        lines.append(f"{human(p['cache_bytes']):>{label}} |{'#' * filled}{' ' * (width - filled)}| "
                     f"{_pct(p['hit_ratio']):>6}{mark}")
    return "\n".join(lines)


def _render(doc: dict[str, Any], names: str | None) -> str:
    console = make_console()
    budget = doc["budget_bytes"]
    points = doc["points"]
    console.print(f"{doc['reads']} reads recorded by {doc['scope']} {doc['pid']} of node {doc.get('node_id', '-')}; "
                  f"cache budget {human(budget) if budget else 'none'}", markup=False, highlight=False)
    console.print(make_table(
        "hit ratio by cache size",
        ["cache size", "hit ratio", "byte hit ratio", ""],
        [[human(p["cache_bytes"]), _pct(p["hit_ratio"]), _pct(p.get("byte_hit_ratio")),
          "budget" if p["cache_bytes"] == budget else ""] for p in points]))
    touched = doc.get("touched_bytes", {})
    dirty = f" less {human(doc['dirty_bytes'])} dirty" if doc.get("dirty_bytes") else ""
    console.print(f"predicted at the budget{dirty} {_pct(doc['predicted_hit_ratio'])}, measured "
                  f"{_pct(doc['measured_hit_ratio'])}; touched in the last hour {human(touched.get('hour'))}, "
                  f"last day {human(touched.get('day'))}", markup=False, highlight=False)
    rows = [[kind, f"{e['name']} ({name})" if e.get("name") else name, e["reads"], _pct(e["predicted_hit_ratio"]),
             _pct(e["measured_hit_ratio"]), human(e["touched_bytes"]["hour"]), human(e["touched_bytes"]["day"])]
            for kind in ("buckets", "tenants") for name, e in doc.get(kind, {}).items()
            if names is None or name == names]
    if rows:
        console.print(make_table("per bucket and tenant (their share of this cache)",
                                 ["scope", "name", "reads", "predicted", "measured", "touched 1 h (est.)", "touched 1 d (est.)"],
                                 rows))
    if doc.get("note"):
        console.print(f"note: {doc['note']}", markup=False, highlight=False)
    return plot(points, budget)


@cache_cli.command("sizing")
def sizing(bucket: Annotated[str | None, typer.Option(help="Plot this bucket's share instead of the node's.")] = None,
           url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """What a bigger or smaller read cache would hit: the miss-ratio curve around the budget."""
    doc = Admin(url, token).get("/admin/cache/sizing")
    if bucket is not None and not as_json:
        entry = doc.get("buckets", {}).get(bucket)
        if entry is None:
            make_console(err=True).print(f"ferry: no reads of bucket {bucket!r} recorded by this worker",
                                         markup=False, highlight=False)
            raise typer.Exit(1)
        doc = {**doc, "points": entry["points"], "predicted_hit_ratio": entry["predicted_hit_ratio"],
               "measured_hit_ratio": entry["measured_hit_ratio"], "reads": entry["reads"],
               "touched_bytes": entry["touched_bytes"]}
    emit(doc, as_json, lambda d: _render(d, bucket))

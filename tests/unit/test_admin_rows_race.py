"""Admin rows changed by two callers at once (SQLite and PostgreSQL): a check read before the
write must not let a concurrent commit be overwritten or deleted. Each test forces the other
commit into the gap just before the guarded write."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from app.adapters.catalog.control.remotes import RemoteRepo
from app.adapters.catalog.control.staging import StagingRepo
from app.adapters.catalog.errors import Conflict
from app.domain.staging import Progress
from tests.support.commit_gaps import other_commit_in_the_gap


def test_a_mapping_saved_while_its_remote_is_deleted_is_never_dropped_silently(engine: Engine) -> None:
    repo = RemoteRepo(engine)
    remote = repo.create(name="far", endpoint="http://127.0.0.1:1")
    deleted: Exception | None = None
    with other_commit_in_the_gap(engine, "DELETE FROM REMOTES",
                                 lambda: repo.put_mapping("ckpt", remote.id, "ckpt-remote")) as outcomes:
        try:
            repo.delete(remote.id)
        except Conflict as exc:
            deleted = exc
    assert len(outcomes) == 1
    mapping_saved = not isinstance(outcomes[0], Exception)
    _, _, mappings = repo.routes()  # (generation, remotes, mappings)
    if mapping_saved:  # the caller was told the mapping is saved: it is there, and the remote too
        assert [m.bucket for m in mappings] == ["ckpt"] and isinstance(deleted, Conflict)
    else:  # the remote went first: the mapping was refused, not dropped after its 200
        assert mappings == [] and deleted is None and isinstance(outcomes[0], Conflict)


@pytest.mark.parametrize("finished", ["done", "failed"])
def test_a_cancel_racing_the_jobs_finish_never_overwrites_it(engine: Engine, finished: str) -> None:
    repo = StagingRepo(engine)
    job = repo.create("b", "p/", "node-a", None)
    assert repo.mark_running(job.id)
    with other_commit_in_the_gap(engine, "UPDATE STAGING_JOBS", lambda: repo.finish(job.id, finished, Progress())) \
            as outcomes, pytest.raises(Conflict, match=f"already {finished}"):
        repo.cancel(job.id)
    assert outcomes == [True] and repo.get(job.id).state == finished

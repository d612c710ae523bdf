"""Admin validation errors (422) keep FastAPI's shape but never echo the value of a secret field:
before, an invalid ``secret_key`` came back verbatim in the error body (found by the secrets scan)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel, Field

from app.admin.common import install_error_handlers


class Body(BaseModel):
    name: str = Field(max_length=5)
    secret_key: str = Field(max_length=10)


def client() -> TestClient:
    api = FastAPI()
    install_error_handlers(api)

    @api.post("/x")
    async def create(body: Body) -> dict[str, str]:
        return {"name": body.name}

    return TestClient(api)


def test_invalid_secret_is_not_echoed() -> None:
    secret = "s3cr3t-" + "x" * 40
    answer = client().post("/x", json={"name": "okay", "secret_key": secret})
    assert answer.status_code == 422
    assert secret not in answer.text
    (error,) = answer.json()["detail"]
    assert error["loc"] == ["body", "secret_key"] and "input" not in error and error["type"]


def test_other_fields_keep_their_input() -> None:
    answer = client().post("/x", json={"name": "toolong", "secret_key": "fine"})
    (error,) = answer.json()["detail"]
    assert answer.status_code == 422 and error["input"] == "toolong"


def test_a_body_that_is_not_an_object_is_not_echoed() -> None:
    answer = client().post("/x", json=["secret_key", "s3cr3t-value"])
    assert answer.status_code == 422 and "s3cr3t-value" not in answer.text

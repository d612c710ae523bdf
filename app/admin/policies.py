"""Policy rules: per bucket (``*`` = every bucket) and key prefix; the longest prefix wins per field.

A change is stored in the catalog and applies to running gateways without a restart: this
process re-reads at once, every other process within about a second (``PolicyBook``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Path, Query, Response
from pydantic import Field, StringConstraints

from app.admin.auth import Authenticator, Principal
from app.admin.common import BUCKET_PATTERN, ByteCount, Model, Out, Prefix, run
from app.bootstrap import Container
from app.domain.policy import PolicyRule

POLICY_BUCKET_PATTERN = r"^(\*|[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])$"
PolicyBucket = Annotated[str, StringConstraints(pattern=POLICY_BUCKET_PATTERN)]
Mode = Literal["write-back", "write-through", "read-only", "bypass"]
Revalidate = Literal["immutable", "ttl", "always"]
Admission = Literal["frequency", "always", "second-hit"]
Prefetch = Literal["sequential", "prefix", "off"]
Replicas = Annotated[int, Field(ge=1, le=2, description="Fleet: 2 acknowledges a write once a second node holds it.")]
Seconds = Annotated[float, Field(ge=0, le=10**9, allow_inf_nan=False)]
PolicyIdPath = Annotated[int, Path(ge=1, le=2**63 - 1)]
BucketQuery = Annotated[str, Query(pattern=BUCKET_PATTERN)]
KeyQuery = Annotated[str, Query(max_length=1024)]


class PolicySettings(Model):
    """Fields left out (or null) inherit from shorter prefixes, ``*`` rules and the node defaults."""

    mode: Mode | None = None
    revalidate: Revalidate | None = None
    ttl_seconds: Seconds | None = None
    serve_stale: bool | None = None
    pinned: bool | None = None
    admission: Admission | None = None
    quota_bytes: ByteCount | None = None
    write_replicas: Replicas | None = None
    prefetch: Prefetch | None = None


class PolicyIn(PolicySettings):
    bucket: PolicyBucket
    prefix: Prefix = ""


class PolicyOut(Out):
    id: int
    bucket: str
    prefix: str
    mode: str | None
    revalidate: str | None
    ttl_seconds: float | None
    serve_stale: bool | None
    pinned: bool | None
    admission: str | None
    quota_bytes: int | None
    write_replicas: int | None
    prefetch: str | None


class EffectivePolicy(Out):
    mode: str
    revalidate: str
    ttl_seconds: float
    serve_stale: bool
    pinned: bool
    admission: str
    quota_bytes: int | None
    write_replicas: int
    prefetch: str


class EffectiveOut(Out):
    bucket: str
    key: str
    policy: EffectivePolicy
    rules: list[PolicyOut] = Field(description="The matching rules, applied in this order (later wins).")


def router(container: Container, auth: Authenticator) -> APIRouter:
    book = container.policies
    api = APIRouter(prefix="/admin/policies", tags=["policies"])

    async def save(rule: PolicyRule) -> tuple[PolicyRule, bool]:
        try:
            return await run(book.save, rule)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from exc

    async def rule_of(policy_id: int, principal: Principal) -> PolicyRule:
        rule = await run(book.get, policy_id)
        if rule is None:
            raise HTTPException(404, f"no policy with id {policy_id}")
        await auth.check_found(principal, rule.bucket, f"no policy with id {policy_id}")
        return rule

    @api.get("", response_model=list[PolicyOut])
    async def list_policies(principal: Principal = auth.tenant_read()) -> list[PolicyRule]:
        """Every rule; a token bound to a tenant sees the rules of that tenant's buckets only."""
        rules = await run(book.stored)
        if principal.tenant_id is None:
            return rules
        mine = await auth.visible(principal, sorted({r.bucket for r in rules if r.bucket != "*"}))
        return [r for r in rules if r.bucket in mine]

    @api.post("", response_model=PolicyOut, responses={201: {"model": PolicyOut, "description": "Created"}})
    async def set_policy(body: PolicyIn, response: Response, principal: Principal = auth.tenant_write()) -> PolicyRule:
        """Create the rule for (bucket, prefix), or replace its settings (200). Applies without restart."""
        await auth.check_bucket(principal, body.bucket)
        rule, created = await save(PolicyRule(**body.model_dump()))
        response.status_code = 201 if created else 200
        return rule

    @api.get("/effective", response_model=EffectiveOut)
    async def effective(bucket: BucketQuery, key: KeyQuery = "", principal: Principal = auth.tenant_read()) -> EffectiveOut:
        """The policy a request for ``bucket/key`` gets now, and the rules it was resolved from."""
        await auth.check_bucket(principal, bucket)
        policy, matching = await run(book.effective, bucket, key)
        return EffectiveOut(bucket=bucket, key=key, policy=EffectivePolicy.model_validate(policy),
                            rules=[PolicyOut.model_validate(r) for r in matching])

    @api.get("/{policy_id}", response_model=PolicyOut)
    async def get_policy(policy_id: PolicyIdPath, principal: Principal = auth.tenant_read()) -> PolicyRule:
        return await rule_of(policy_id, principal)

    @api.put("/{policy_id}", response_model=PolicyOut)
    async def replace_policy(policy_id: PolicyIdPath, body: PolicySettings,
                             principal: Principal = auth.tenant_write()) -> PolicyRule:
        """Replace a rule's settings (its bucket and prefix stay; create another rule to move it)."""
        rule = await rule_of(policy_id, principal)
        return (await save(PolicyRule(bucket=rule.bucket, prefix=rule.prefix, **body.model_dump())))[0]

    @api.delete("/{policy_id}", status_code=204)
    async def delete_policy(policy_id: PolicyIdPath, principal: Principal = auth.tenant_write()) -> Response:
        await rule_of(policy_id, principal)
        if not await run(book.delete, policy_id):
            raise HTTPException(404, f"no policy with id {policy_id}")
        return Response(status_code=204)

    return api

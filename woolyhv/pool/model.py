"""The pool's documents: what a node publishes, what a reservation is, what a client asks for.

They are pydantic models because every one of them crosses a trust boundary: a node's inventory is read by
every controller, a placement request comes from any client. A document that does not validate is reported and
ignored (a node) or answered with a clear error (a request); it never reaches the placement code.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Name = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")]
Text = Annotated[str, Field(max_length=4096)]
Bytes = Annotated[int, Field(ge=0, le=1 << 60)]
Vendor = Literal["cpu", "nvidia", "amd"]
Digest = Annotated[str, Field(min_length=8, max_length=64, pattern=r"^[0-9a-f]+$")]


class _Doc(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=False)


class Device(_Doc):
    ordinal: int = Field(ge=0, lt=1024)
    vendor: Vendor
    name: Text
    arch: Text  # sm_90, gfx942, x86_64 (the CPU backend)
    total: Bytes
    used: Bytes = 0  # physical bytes in use (all sessions, dedup counted once)
    unreserved: Bytes = 0  # of which not covered by a reservation (direct clients, sessions beyond theirs)
    jit_targets: list[Text] = Field(default_factory=list, max_length=16)


class TenantUse(_Doc):
    sessions: int = Field(0, ge=0)
    memory: Bytes = 0
    shared: Bytes = 0  # bytes of dedup'd content this tenant maps on the node


class SessionRow(_Doc):
    session: Text
    tenant: Text
    memory: Bytes = 0
    program: Text = ""
    reservation: Text = ""
    age_s: float = 0.0
    checkpoint_s: float = Field(0.0, ge=0.0)  # NOTE [checkpoints]: the tenant's interval (0: not checkpointed)
    checkpoint: dict[str, float | int | str] = Field(default_factory=dict, max_length=16)  # the last one
    moves: int = Field(0, ge=0)  # times the session moved or was restored before it came here


class Inventory(_Doc):
    """``nodes/<name>``: what a node offers, kept current by its agent under the node's lease."""

    node: Name
    endpoint: Text
    server_key: Text = ""  # the node's CURVE public key (Z85), handed to clients with their placement
    version: Text = ""
    started: float = 0.0
    updated: float = 0.0
    lease: int = 0
    devices: list[Device] = Field(default_factory=list, max_length=64)
    tenants: dict[str, TenantUse] = Field(default_factory=dict, max_length=4096)
    sessions: list[SessionRow] = Field(default_factory=list, max_length=256)
    session_count: int = Field(0, ge=0)
    load: float = Field(0.0, ge=0.0)  # device busy fraction over the last seconds (1.0 = always busy)
    dedup: Text = ""  # "xxh3:2097152": the hash and chunk size of the node's dedup store
    content: list[Digest] = Field(default_factory=list, max_length=4096)  # NOTE [content affinity]
    content_threshold: int = Field(256, ge=0, le=256)
    content_bytes: Bytes = 0
    labels: dict[str, Text] = Field(default_factory=dict, max_length=64)


class Reservation(_Doc):
    id: Name
    tenant: Text
    bytes: Bytes
    device: int = Field(0, ge=0)
    created: float
    claim_by: float  # an unclaimed reservation is released after this time
    session: Text = ""  # the gpud session that claimed it
    decision: Text = ""


class Ledger(_Doc):
    """``ledger/<node>``: the node's reservations. Controllers add with a compare-and-swap transaction; the node's
    agent claims and releases; both write it under the node's lease, so a dead node's ledger goes with it."""

    node: Name
    reservations: dict[str, Reservation] = Field(default_factory=dict, max_length=100_000)

    def reserved(self, device: int | None = None) -> int:
        return sum(r.bytes for r in self.reservations.values() if device is None or r.device == device)


class PlaceRequest(_Doc):
    """What a client asks the controller for."""

    tenant: Text = "default"
    memory: Bytes = 0
    vendor: Vendor | None = None
    arch: Text | None = None  # "sm_90" exactly, or "sm_80+" for that or newer
    priority: int = Field(0, ge=-1000, le=1000)
    deadline_s: float = Field(60.0, ge=0.0, le=86400.0)
    digests: list[Digest] = Field(default_factory=list, max_length=4096)  # NOTE [content affinity]
    program: Text = ""
    memory_source: Text = "declared"  # declared (WOOLY_MEM), estimate (WOOLY_MODEL), default


class Cordon(_Doc):
    reason: Text = ""
    at: float = 0.0


class MoveOrder(_Doc):
    """``moves/<source>/<session>``: a session of a draining node goes to ``target`` (NOTE [drain])."""

    session: Text
    tenant: Text
    source: Name
    target: Name
    endpoint: Text
    server_key: Text = ""
    reservation: Text = ""
    decision: Text = ""
    token: Text
    created: float = 0.0
    updated: float = 0.0
    state: Literal["ordered", "failed"] = "ordered"
    error: Text = ""


class StandbyOrder(_Doc):
    """``standby/<source>/<session>``: where a checkpointed session's checkpoints go (NOTE [standby])."""

    session: Text
    tenant: Text
    source: Name
    target: Name
    endpoint: Text
    server_key: Text = ""
    decision: Text = ""
    token: Text
    created: float = 0.0

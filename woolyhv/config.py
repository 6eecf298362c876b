"""Settings from the environment (``WOOLY_*``), shared by the CLI, the shim and gpud."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="WOOLY_", extra="ignore")

    server: str = Field("", description="gpud endpoint (tcp://host:5555, ipc:///path); empty = embedded local gpud")
    tenant: str = Field("default", description="tenant this client belongs to")
    token: str = Field("", description="tenant token, checked by gpud when its config asks for one")
    timeout_s: float = Field(4.0, description="seconds of gpud silence after which a call fails")
    connect_timeout_s: float = Field(10.0, description="seconds to wait for gpud to answer the first hello")
    log_level: str = Field("info", description="gpud log level")
    cpu_memory: int = Field(0, description="bytes the CPU backend offers (0 = host RAM)")
    backend: str = Field("auto", description="gpud backend: auto, cpu, nvidia, amd")
    shm: bool = Field(True, description="use shared memory for bulk copies when gpud is on this host")


def settings() -> Settings:
    return Settings()

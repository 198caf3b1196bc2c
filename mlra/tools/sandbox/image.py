"""Building the image real runs use (`mlra image build`) from the Dockerfile shipped in
the package (tools/sandbox/docker/Dockerfile), so a wheel builds it as a checkout does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


class ImageBuildError(Exception):
    """The build cannot start (no engine, no Dockerfile); the message says what to do."""


class ImageBuildFailed(ImageBuildError):
    """The engine ran the build and a step failed (a base image it cannot pull, say)."""


def default_dockerfile() -> Path:
    """mlra's own Dockerfile, package data beside this module."""
    return Path(__file__).resolve().parent / "docker" / "Dockerfile"


def build_image(
    tag: str, *, dockerfile: Path | None = None, echo: Callable[[str], None] = print
) -> None:
    from mlra.tools.sandbox.docker_preflight import DockerUnavailable, docker_client

    path = (dockerfile or default_dockerfile()).resolve()
    if not path.is_file():
        raise ImageBuildError(f"no Dockerfile at {path}; name one with --file")
    try:
        client = docker_client(timeout=600)
    except DockerUnavailable as exc:
        raise ImageBuildError(str(exc)) from None
    try:
        lines = client.api.build(
            path=str(path.parent), dockerfile=path.name, tag=tag, rm=True, decode=True
        )
        for chunk in lines:
            if "error" in chunk:
                detail = (chunk.get("errorDetail") or {}).get("message") or chunk["error"]
                raise ImageBuildFailed(f"building {tag} failed: {detail.strip()}")
            text = (chunk.get("stream") or "").rstrip()
            if text:
                echo(text)
    except ImageBuildError:
        raise
    except Exception as exc:
        raise ImageBuildFailed(f"building {tag} failed: {str(exc).strip()}") from None

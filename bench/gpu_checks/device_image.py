"""What the GPU machines this project is lent already hold, so the wheels carried to one
(bench/gpu_wheels.py) are only what its image lacks: the machine has no network, and
what travels with the checkout is capped at 64 MiB, which the CUDA torch alone is
twelve times over.

Read from the device tool's own page (/work/.library/device/KINDS.md, "Python packages
already there", last read on a machine of the `nvidia-h200` kind on 2026-11-17, and its
"pip list" row for the versions). A package the next machine lacks after all shows as
the `install` check's first failure (bench/gpu_checks/machine.py), naming it."""

from __future__ import annotations

PYTHON = "3.12"
"""`python3` there: /opt/torch/.venv/bin/python3, Python 3.12.3."""
PLATFORMS = [
    "manylinux2014_x86_64",
    *(f"manylinux_2_{minor}_x86_64" for minor in (17, 24, 27, 28, 31, 34, 35, 39)),
    "linux_x86_64",
]
"""The wheel tags its glibc (Ubuntu 24.04's 2.39, Python 3.12.3's) takes, newest last."""

VERSIONS = {
    "accelerate": "1.15.0",
    "huggingface-hub": "1.33.0",
    "numpy": "2.5.2",
    "safetensors": "0.8.0",
    "tokenizers": "0.23.2",
    "torch": "2.11.0",
    "transformers": "5.17.0",
    "triton": "3.6.0",
}
"""The versions one session's `pip list` there showed, for the packages mlra asks for."""

PACKAGES = frozenset(
    """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio
    attrs botorch build certifi charset-normalizer chex click cloudpickle cmake colorama
    contourpy coverage cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x
    cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax
    fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
    huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax
    jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader
    lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
    markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack
    multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba
    numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc
    nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand
    nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13
    nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
    opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint
    packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client
    propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing
    pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
    pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests
    rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn
    sentencepiece sentence-transformers setuptools shellingham simplejson six
    sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server
    tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio
    torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton
    typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel
    wrapt xarray xxhash yarl zipp""".split()
)
"""Every distribution the image holds, by its normalised name."""

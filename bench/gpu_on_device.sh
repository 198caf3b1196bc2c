#!/usr/bin/env bash
# The one command for a lent GPU machine (issue 41): install mlra offline over the
# machine's own CUDA torch from the wheels bench/gpu_wheels.py made, then every GPU check.
#
#   bench/gpu_on_device.sh WHEELS OUT [GPU_CHECK_ARGS...]
#
# The arguments after OUT go to bench/gpu_check.py: `--only mlra-run,lm-eval` for a second
# try at what failed, `--device cpu` for a rehearsal on a machine without a GPU (with
# PYTHON naming an environment laid out as the machine's; docs/contributing.md).
# Run from the checkout's root, as the device tool runs a command (WHEELS carried beside
# the tree, OUT its $OUT). What comes back is capped at 8 files, so OUT gets six: the
# machine's GPU, Python and torch (machine.txt), pip's output (install.log), the check's
# (gpu_check.log), its report (report.md, report.json), and the whole report folder with
# every check's output and the Resources pane's SVG (gpu-report.tgz). The exit status is
# the check's (0: every check passed or was skipped), or pip's where the install failed.
set -uo pipefail
wheels=${1:?the wheel folder bench/gpu_wheels.py made}
out=${2:?the folder to write the report into}
shift 2
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1

{
    date -u
    nvidia-smi -L
    "$py" -VV
    "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt"

# Not editable: the wheel's install is the path a user's `pip install` takes. No build
# isolation: the image's setuptools builds it (an isolated build would ask the index).
"$py" -m pip install --no-index --find-links "$wheels" --no-build-isolation '.[ml]' \
    >"$out/install.log" 2>&1
installed=$?
tail -3 "$out/install.log"
if [ "$installed" -ne 0 ]; then
    echo "gpu_on_device: the install failed (install.log)"
    exit "$installed"
fi

scratch="$(mktemp -d)"
"$py" bench/gpu_check.py --out "$scratch/gpu-report" "$@" 2>&1 | tee "$out/gpu_check.log"
checked=${PIPESTATUS[0]}
cp "$scratch/gpu-report/report.md" "$scratch/gpu-report/report.json" "$out/" 2>/dev/null
tar -czf "$out/gpu-report.tgz" -C "$scratch" gpu-report
exit "$checked"

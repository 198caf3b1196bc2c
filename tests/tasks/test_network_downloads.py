"""A task whose code downloads through a network client, not a dataset loader, is said
to need the network: MLAgentBench's CLRS fetches its data from Google Cloud Storage
with `requests.get` (and reads it with tensorflow_datasets), and `mlra tasks show`
said "downloads: none needed" and "this machine: ready" of it, so a run went ahead and
its grading failed with no network. `tfds.load`, `requests.get`, urllib's fetches and
`gs://` URLs are found (tasks/network_reads.py), with the file each is in; ordinary
code that merely mentions them is not. Folders written here, imitating the pattern."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlra.console.cli.cli import main as mlra_main
from mlra.tasks.foreign.common import CACHE_VAR
from tests.tasks.folders import write_tree
from tests.tasks.test_folder_needs import EVAL_PY, _refused, _run, mab_folder

FETCH_WHEN_ABSENT = (
    "import os\nimport requests\n\n"
    "def _url():\n    return 'https://storage.example.org/bucket/data.tar.gz'\n\n"
    "def _maybe_download(path='/tmp/data'):\n"
    "    if os.path.isdir(path):\n        return path\n"
    "    url = _url()\n"
    "    reply = requests.get(url, allow_redirects=True)\n"
    "    open(os.path.join(path, 'data.tar.gz'), 'wb').write(reply.content)\n"
    "    return path\n"
)
"""CLRS's pattern: the data fetched from a URL a helper returns, where /tmp lacks it."""

TFDS_READER = (
    "import tensorflow_datasets as tfds\n\n"
    "def create_dataset(folder, name):\n"
    "    return tfds.load(f'some_dataset/{name}', data_dir=folder, split='train')\n"
)
"""A tfds load from a folder the code computed (the copy it fetched): not judged."""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(CACHE_VAR, str(folder))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return folder


def _show(source: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    assert mlra_main(["tasks", "show", str(source)]) == 0
    out = capsys.readouterr().out.splitlines()
    return {line.split(":", 1)[0]: line for line in out if ":" in line}


def test_a_task_fetching_its_data_with_requests_is_not_ready_offline(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = mab_folder(
        tmp_path,
        files={
            "scripts/eval.py": FETCH_WHEN_ABSENT + EVAL_PY,
            "env/train.py": FETCH_WHEN_ABSENT,
            "env/dataset.py": TFDS_READER,
        },
    )
    lines = _show(source, capsys)
    downloads = lines["downloads"]
    assert "none needed" not in downloads
    assert (
        "grading would download with requests.get(url) (scripts/eval.py), with no network"
        in downloads
    )
    assert "the starter downloads with requests.get(url) (env/train.py), with no network" in (
        downloads
    )
    assert "tfds" not in downloads  # its data_dir is the folder the code fetched
    assert lines["this machine"].startswith("this machine: cannot run it now: cannot be graded")
    runs = tmp_path / "runs"
    line = _refused(capsys, _run(source, runs), runs)
    assert "requests.get(url) (scripts/eval.py)" in line


def test_tfds_urllib_and_cloud_storage_urls_are_downloads(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = mab_folder(
        tmp_path,
        files={
            "env/data.py": (
                "import tensorflow_datasets as tfds\n"
                "from urllib.request import urlretrieve\n"
                "import tensorflow as tf\n\n"
                "def train():\n    return tfds.load('mnist', split='train')\n\n"
                "def local():\n    return tfds.load('mnist', data_dir='tfds_copy')\n\n"
                "def offline():\n    return tfds.load('cifar10', download=False)\n\n"
                "def vocab():\n"
                "    urlretrieve('https://example.org/vocab.txt', 'vocab.txt')\n\n"
                "def labels():\n"
                "    return tf.io.gfile.GFile('gs://some-bucket/labels.csv').read()\n"
            ),
            "env/tfds_copy/mnist/1.0.0/dataset_info.json": "{}",
        },
    )
    downloads = _show(source, capsys)["downloads"]
    assert downloads.startswith("downloads:  the starter downloads with ")
    assert 'tfds.load("mnist") (env/data.py)' in downloads
    assert "urlretrieve('https://example.org/vocab.txt') (env/data.py)" in downloads
    assert "'gs://some-bucket/labels.csv' (env/data.py)" in downloads
    assert "cifar10" not in downloads and downloads.count("mnist") == 1


def test_code_that_only_mentions_a_download_needs_none(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = mab_folder(
        tmp_path,
        files={
            "env/train.py": (
                '"""Data first came from gs://some-bucket/data (now in data/)."""\n'
                "import argparse\nimport logging\n"
                "import requests  # imported, never called\n"
                "import json\n\n"
                "def load(name):\n    return json.load(open(name))\n\n"
                "def main(session):\n"
                "    # mirrored from gs://some-bucket/data\n"
                "    parser = argparse.ArgumentParser()\n"
                "    parser.add_argument('--src', help='gs://some-bucket/x')\n"
                "    print('the original is at gs://some-bucket/data')\n"
                "    logging.info('see %s', 'gs://some-bucket/data')\n"
                "    if parser.prog.startswith('gs://'):\n        return None\n"
                "    requests.get('http://localhost:8000/health')\n"
                "    session.get('https://example.org/x')\n"
                "    if False:\n        raise ValueError('gs://some-bucket/y')\n"
                "    return load('data/train.json')\n"
                'open("submission.csv", "w").write("0.5\\n")\n'
            ),
        },
    )
    lines = _show(source, capsys)
    assert lines["downloads"] == "downloads:  none needed"
    assert lines["this machine"] == "this machine: ready"


def test_a_prepare_py_downloading_in_python_says_it_needs_the_network(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = mab_folder(
        tmp_path,
        files={
            "scripts/prepare.py": (
                "import requests\n"
                "data = requests.get('https://example.org/data.zip').content\n"
                "open('../env/data.zip', 'wb').write(data)\n"
            )
        },
    )
    prepared = _show(source, capsys)["prepared"]
    assert prepared == (
        "prepared:   not yet; `mlra run` runs scripts/prepare.py first, once; it downloads "
        "with requests.get('https://example.org/data.zip'), which needs the network"
    )
    write_tree(source, {"scripts/prepare.py": "import requests\nprint('no download')\n"})
    assert "downloads with" not in _show(source, capsys)["prepared"]

"""A task whose code downloads through a network client, not a dataset loader, is said
to need the network: MLAgentBench's CLRS fetches its data from Google Cloud Storage
with `requests.get` (and reads it with tensorflow_datasets), and `mlra tasks show`
said "downloads: none needed" and "this machine: ready" of it, so a run went ahead and
its grading failed with no network. `tfds.load`, `requests.get`, urllib's fetches and
`gs://` URLs are found (tasks/network_reads.py), with the file each is in; ordinary
code that merely mentions them is not. Folders written here, imitating the pattern."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.console.cli.cli import main as mlra_main
from mlra.console.cli.needs_cli import gradable_or_refused
from mlra.tasks.foreign.common import CACHE_VAR
from mlra.tasks.spec import load_task
from tests.tasks.folders import write_tree
from tests.tasks.test_folder_needs import EVAL_PY, _run, mab_folder

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


def test_a_task_fetching_its_data_with_requests_is_ready_with_a_note(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A static reading cannot tell a fetch that runs from one that never does (a local
    fallback, a file the task ships): said as possible, never a refusal."""
    source = mab_folder(
        tmp_path,
        files={
            "scripts/eval.py": FETCH_WHEN_ABSENT + EVAL_PY,
            "env/train.py": FETCH_WHEN_ABSENT + 'open("submission.csv", "w").write("0.5\\n")\n',
        },
    )
    lines = _show(source, capsys)
    downloads = lines["downloads"]
    grading = (
        "its grading code may download: requests.get(url) (scripts/eval.py); "
        "with no network its grading may fail"
    )
    starter = (
        "its starter may download: requests.get(url) (env/train.py); "
        "with no network its first run may fail"
    )
    assert downloads == f"downloads:  {grading}; {starter}"
    assert lines["this machine"] == f"this machine: ready ({grading}) ({starter})"
    assert mlra_main(["tasks", str(source.parent)]) == 0
    listing = capsys.readouterr().out
    assert grading in listing and "cannot" not in listing
    runs = tmp_path / "runs"
    assert _run(source, runs) == 0, capsys.readouterr().err
    (run_dir,) = runs.iterdir()
    notices = [e.message for e in read_events(run_dir / "events.jsonl") if isinstance(e, ev.Notice)]
    assert starter in notices
    assert json.loads((run_dir / "result.json").read_text())["ungraded"] is None


def _never_refused(source: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The folder is ready (a note at most) and a run of it is not refused."""
    line = _show(source, capsys)["this machine"]
    assert line.startswith("this machine: ready"), line
    assert gradable_or_refused(load_task(source), False) == ""
    return line


@pytest.mark.parametrize(
    "grader",
    [
        # A local server's URL built at run time.
        "import requests\nBASE = 'http://127.0.0.1:8000'\n"
        "def score():\n    return requests.post(BASE + '/score').json()\n",
        "import requests\nHOST = 'localhost'\n"
        "def score():\n    return requests.get('http://{}:8000/score'.format(HOST))\n",
        # A fetch with a local fallback.
        "import requests\n"
        "def labels(url):\n"
        "    try:\n        return requests.get(url).text\n"
        "    except Exception:\n        return open('labels.csv').read()\n",
        # A download guarded by a file the task ships.
        "import os\nimport urllib.request\n"
        "if not os.path.exists('answers.csv'):\n"
        "    urllib.request.urlretrieve(ANSWERS_URL, 'answers.csv')\n",
        # A helper's function nothing calls, and a bare bucket constant.
        "import requests\nBUCKET = 'gs://bucket'\ndef unused(url):\n    return requests.get(url)\n",
    ],
)
def test_what_a_static_reading_may_mistake_never_refuses_a_run(
    grader: str, tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = mab_folder(tmp_path, files={"scripts/eval.py": grader + EVAL_PY})
    line = _never_refused(source, capsys)
    assert "cannot" not in line and ("will" not in line)


def test_an_exact_local_hostname_is_no_download(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grader = (
        "import requests\n"
        "requests.get('http://localhost:8000/a')\n"
        "requests.get('http://[::1]:8000/b')\n"
        "requests.get('http://127.0.0.1/c')\n"
        "requests.get('http://localhost.evil.com/d')\n"
    )
    source = mab_folder(tmp_path, files={"scripts/eval.py": grader + EVAL_PY})
    downloads = _show(source, capsys)["downloads"]
    assert "localhost.evil.com" in downloads
    assert "/a'" not in downloads and "/b'" not in downloads and "/c'" not in downloads


def test_code_nested_too_deep_to_read_is_skipped(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`x = ----...1` (5,000 signs) raised RecursionError out of `tasks show`."""
    deep = "x = " + "-" * 5000 + "1\n"
    source = mab_folder(tmp_path, files={"env/deep.py": deep, "scripts/deep_eval.py": deep})
    write_tree(source, {"scripts/eval.py": "import deep_eval\n" + EVAL_PY})
    assert _never_refused(source, capsys) == "this machine: ready"


def test_many_downloads_are_listed_the_first_few_then_how_many_more(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """200 distinct `s3://` strings made an 8,000-character line."""
    buckets = "".join(f"B{i} = 's3://bucket/part{i:03d}'\n" for i in range(200))
    source = mab_folder(tmp_path, files={"scripts/eval.py": buckets + EVAL_PY})
    downloads = _show(source, capsys)["downloads"]
    assert "'s3://bucket/part004'" in downloads and "part005" not in downloads
    assert "and 195 more" in downloads and len(downloads) < 400


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
            "env/dataset.py": TFDS_READER,
        },
    )
    downloads = _show(source, capsys)["downloads"]
    assert downloads.startswith("downloads:  its starter may download: ")
    assert 'tfds.load("mnist") (env/data.py)' in downloads
    assert "urlretrieve('https://example.org/vocab.txt') (env/data.py)" in downloads
    assert "'gs://some-bucket/labels.csv' (env/data.py)" in downloads
    assert "cifar10" not in downloads and downloads.count("mnist") == 1
    assert "some_dataset" not in downloads  # its data_dir is the folder the code fetched


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
        "prepared:   not yet; `mlra run` runs scripts/prepare.py first, once; it may download "
        "with requests.get('https://example.org/data.zip'), which needs the network"
    )
    write_tree(source, {"scripts/prepare.py": "import requests\nprint('no download')\n"})
    assert "download with" not in _show(source, capsys)["prepared"]


def test_an_api_called_with_post_or_put_is_no_download(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`requests.post(...)` to an API was said as "may download": it calls the network."""
    post = "import requests\n\nrequests.post('https://api.example.com/score', json={})\n"
    put = (
        "import requests\n\n"
        "requests.request('PUT', 'https://api.example.com/up', data=b'')\n"
        "requests.get('https://example.com/data.csv')\n"
    )
    source = mab_folder(tmp_path, files={"env/train.py": post, "scripts/eval.py": put + EVAL_PY})
    downloads = _show(source, capsys)["downloads"]
    assert downloads == (
        "downloads:  its grading code may download or call the network: "
        "requests.request('https://api.example.com/up') (scripts/eval.py), "
        "requests.get('https://example.com/data.csv') (scripts/eval.py); "
        "with no network its grading may fail; its starter may call the network: "
        "requests.post('https://api.example.com/score') (env/train.py); "
        "with no network its first run may fail"
    ), downloads


def test_httpx_stream_is_read_method_first(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`httpx.stream("POST", url)` was read as if "POST" were its URL (a literal path
    then, read here): the call went unsaid. Its method comes first, as requests.request's."""
    stream = "import httpx\n\nwith httpx.stream('POST', 'https://api.example.com/chat') as r:\n    pass\n"
    source = mab_folder(tmp_path, files={"env/train.py": stream})
    downloads = _show(source, capsys)["downloads"]
    assert downloads == (
        "downloads:  its starter may call the network: "
        "httpx.stream('https://api.example.com/chat') (env/train.py); "
        "with no network its first run may fail"
    ), downloads

"""Downloads a task's code does through a network client rather than a dataset loader,
read with `ast`, never run: `tfds.load` (tensorflow_datasets), `requests.get` and
urllib's `urlopen`/`urlretrieve` and their kind, and `gs://`/`s3://` URLs. MLAgentBench's
CLRS fetches its data from Google Cloud Storage with `requests.get` when /tmp holds no
copy, and `mlra tasks show` said "none needed" of it: the run then failed in a sandbox
with no network. What is found is a note, worded as possible (tasks/needs.py
`fetch_notes`), never a refusal: a static reading cannot tell a fetch with a local
fallback, one guarded by a file the task ships, an unused helper or a local server's
URL built at run time from a download that happens.

As careful as code_reading.py's dataset rules: a call counts only where its name
resolves through the file's own imports (`tfds` is `import tensorflow_datasets as tfds`,
not a local `load`), so a module imported and never called downloads nothing; a
literal URL that is not http(s) or names this machine does not count; `tfds.load`
with `download=False`, or a literal `data_dir` that holds files, reads a local copy,
and one whose `data_dir` is computed is not judged (as `download=True` with a computed
`root` is not); a `gs://bucket` string counts in code only (`startswith("gs://")` names
no bucket), not in a docstring, a comment, a message printed, logged or raised, or an
argument's `help=`.
"""

from __future__ import annotations

import ast
import re
import urllib.parse
from pathlib import Path

from mlra.tasks.code_reading import Found, every_node, parse, relative

FETCHERS = {
    **{f"requests.{verb}": "url" for verb in ("get", "post", "put", "head", "request")},
    **{f"httpx.{verb}": "url" for verb in ("get", "post", "stream")},
    "urllib.request.urlopen": "url",
    "urllib.request.urlretrieve": "url",
    "wget.download": "url",
    "gdown.download": "url",
    "torch.hub.download_url_to_file": "url",
    "torch.hub.load_state_dict_from_url": "url",
    "torchvision.datasets.utils.download_url": "url",
}
"""Calls that fetch over the network, by their module's name, and their URL's keyword
(`requests.request`'s and `httpx.stream`'s URL is their second argument: the method
comes first)."""

METHOD_FIRST = {"requests.request", "httpx.stream"}
"""Fetchers called with the method first, then the URL: `httpx.stream("POST", url)`."""

SENDS = {"requests.post", "requests.put", "httpx.post"}
"""Fetchers that send rather than fetch: an API's endpoint called, worded so."""

SEND_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
"""`requests.request`'s and `httpx.stream`'s methods that send."""

TFDS_LOADS = {"tensorflow_datasets.load", "tensorflow_datasets.data_source"}
"""tensorflow_datasets' loaders: each downloads and prepares what its data_dir lacks."""

REMOTE_SCHEMES = ("gs://", "s3://")
"""Cloud storage URLs, read through tf.io.gfile, gcsfs, fsspec, tfds: the network."""

REMOTE_URL = re.compile(r"(?:gs|s3)://[\w{]")
"""A bucket named after the scheme: `path.startswith("gs://")` alone fetches nothing."""

LOCAL_HOSTS = {"localhost", "127.0.0.1", "0.0.0.0", "::1"}
"""A URL's exact hostname naming this machine: a local server, no download
(`http://localhost.evil.com` is no local server)."""

QUIET_CALLS = {"print", "warn", "debug", "info", "warning", "error", "exception", "critical"}
"""Calls whose string arguments are messages, never fetched (print, logging, warnings)."""


def network_downloads(files: list[Path], root: Path, bases: list[Path]) -> list[Found]:
    """What each of `files` downloads through a network client, with the file it is in."""
    found: list[Found] = []
    for path in files:
        tree = parse(path)
        if tree is None:
            continue
        try:
            reads = network_reads(tree, [path.parent, *bases])
        except (RecursionError, MemoryError):
            continue  # a file nested too deep to walk (`x = ----...1`): not judged
        found += [Found(what, relative(path, root), sends) for what, sends in reads]
    return found


def reaching(found: list[Found]) -> str:
    """How a note words what `found` does with the network: an API's endpoint called
    (`requests.post`) is no download."""
    sends = {f.sends for f in found}
    if sends == {True}:
        return "may call the network"
    return "may download or call the network" if True in sends else "may download"


def network_reads(tree: ast.Module, bases: list[Path]) -> list[tuple[str, bool]]:
    """What `tree` downloads through a network client, as written (`requests.get(url)`,
    `tfds.load("mnist")`, `"gs://bucket/x"`), in order, once each, and whether it sends
    (`requests.post`) rather than fetches; `bases`: where a literal `data_dir` is
    looked for."""
    names = _imported_names(tree)
    found: list[str] = []
    sends: set[str] = set()
    counted: set[int] = set()
    for node in every_node(tree):
        if not isinstance(node, ast.Call):
            continue
        full = _resolved(node.func, names)
        said = None
        if full in FETCHERS:
            said = _fetch(node, full)
        elif full in TFDS_LOADS:
            said = _tfds(node, bases)
        if said is not None:
            found.append(said)
            if _sends(node, full):
                sends.add(said)
            counted.update(id(n) for n in ast.walk(node))
    quiet = _messages(tree)
    for node in every_node(tree):
        if isinstance(node, ast.JoinedStr):  # read whole, not its literal parts again
            quiet.update(id(n) for n in node.values)
        if id(node) in counted or id(node) in quiet:
            continue
        text = _string(node)
        if text is not None and REMOTE_URL.match(text):
            found.append(_short(repr(text)))
    return [(what, what in sends) for what in dict.fromkeys(found)]


def _imported_names(tree: ast.Module) -> dict[str, str]:
    """Each name the file's imports bind, to what it names (`tfds` -> `tensorflow_datasets`,
    `urlopen` -> `urllib.request.urlopen`, `urllib` -> `urllib`)."""
    names: dict[str, str] = {}
    for node in every_node(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _resolved(func: ast.expr, names: dict[str, str]) -> str:
    """`func`'s dotted name with its first part read through the imports; "" where that
    part is no import (`self.session.get`, a local function)."""
    parts: list[str] = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name) or func.id not in names:
        return ""
    return ".".join([names[func.id], *reversed(parts)])


def _fetch(call: ast.Call, full: str) -> str | None:
    """The fetch as written, or None where its literal URL is no download (not http(s),
    or this machine). A computed URL counts: these clients fetch nothing else."""
    position = 1 if full in METHOD_FIRST else 0
    url = next((k.value for k in call.keywords if k.arg == FETCHERS[full]), None)
    if url is None and len(call.args) > position:
        url = call.args[position]
    shown = ast.unparse(call.func)
    if url is None:
        return f"{shown}(...)"
    text = _string(url)
    if text is not None and text.startswith(("http://", "https://")):
        if _hostname(text) in LOCAL_HOSTS:
            return None
    elif text is not None and isinstance(url, ast.Constant):
        return None  # a literal path or file:// URL: read here
    return _short(f"{shown}({ast.unparse(url)})")


def _sends(call: ast.Call, full: str) -> bool:
    if full in SENDS:
        return True
    if full not in METHOD_FIRST:
        return False
    method = next((k.value for k in call.keywords if k.arg == "method"), None)
    method = method if method is not None or not call.args else call.args[0]
    text = _string(method) if method is not None else None
    return text is not None and text.upper() in SEND_METHODS


def _tfds(call: ast.Call, bases: list[Path]) -> str | None:
    """A tensorflow_datasets load that would download, or None: `download=False`, a
    literal data_dir holding files (a local copy), or a computed one (not judged)."""
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    download = keywords.get("download")
    if isinstance(download, ast.Constant) and download.value is False:
        return None
    data_dir = keywords.get("data_dir")
    if data_dir is not None:
        folder = _string(data_dir) if isinstance(data_dir, ast.Constant) else None
        if folder is None:
            return None  # computed: it may name the copy the code made
        if not folder.startswith(REMOTE_SCHEMES) and _holds_files(folder, bases):
            return None
    name = keywords.get("name", call.args[0] if call.args else None)
    shown = ast.unparse(call.func)
    if name is None:
        return f"{shown}(...)"
    text = _string(name)
    return _short(f'{shown}("{text}")' if text is not None else f"{shown}({ast.unparse(name)})")


def _string(node: ast.AST) -> str | None:
    """A string literal's text; an f-string's with each `{...}` as written."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(value.value)
            elif isinstance(value, ast.FormattedValue):
                parts.append("{" + ast.unparse(value.value) + "}")
        return "".join(parts)
    return None


def _messages(tree: ast.Module) -> set[int]:
    """The nodes that are only words: docstrings (any statement that is a bare string),
    what is printed, logged or warned, exceptions' messages and `help=` texts."""
    quiet: set[int] = set()
    for node in every_node(tree):
        said: list[ast.AST] = []
        if isinstance(node, ast.Expr) and _string(node.value) is not None:
            said.append(node.value)
        elif isinstance(node, ast.Raise) and node.exc is not None:
            said.append(node.exc)
        elif isinstance(node, ast.Assert) and node.msg is not None:
            said.append(node.msg)
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else ""
            name = node.func.id if isinstance(node.func, ast.Name) else name
            if name in QUIET_CALLS:
                said += node.args
            said += [k.value for k in node.keywords if k.arg == "help"]
        for inner in said:
            quiet.update(id(n) for n in ast.walk(inner))
    return quiet


def _hostname(url: str) -> str | None:
    """The URL's host, exactly (`{...}` parts of an f-string stand as written)."""
    try:
        return urllib.parse.urlsplit(url).hostname
    except ValueError:
        return None


def _holds_files(folder: str, bases: list[Path]) -> bool:
    for base in bases:
        candidate = Path(folder) if Path(folder).is_absolute() else base / folder
        if candidate.is_dir() and any(p.is_file() for p in candidate.rglob("*")):
            return True
    return False


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."

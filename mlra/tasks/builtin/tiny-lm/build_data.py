"""Build the tiny-lm task's data from Debian's `r-cran-janeaustenr` package.

Not a starter file: it is never copied into the workspace, because it writes
the hidden evaluation data too. The outputs are committed; this script is how
they were made, so that anyone can check and remake them:

    apt-get download r-cran-janeaustenr        # version 1.0.0-1, see DATA_LICENSE.md
    python tasks/tiny-lm/build_data.py --deb r-cran-janeaustenr_1.0.0-1_all.deb

Why this source: the six novels of Jane Austen (public domain) ship in that
package as clean text without any Project Gutenberg boilerplate, and Debian's
archive is reachable from machines without internet. The package stores them
as an R lazy-load database; the few lines of R deserialization below read it
without R.

What is written (all deterministic, no randomness outside a seeded RNG):
- starter/data/train.txt: Emma, Pride and Prejudice, Sense and Sensibility.
- starter/data/valid.txt: Northanger Abbey, chapters 1-15 (the agent's own check).
- hidden/data/heldout.jsonl: Persuasion, chapters 1-8, one document per chapter
  (perplexity).
- hidden/data/pairs/<phenomenon>.jsonl: minimal pairs made from Persuasion's
  sentences by one controlled corruption each (accuracy).
- hidden/validation/: the `validate` tool's split, from text neither the agent nor
  the test has (Northanger Abbey, chapters 16 on): heldout.jsonl (chapters 16-23),
  pairs/<phenomenon>.jsonl (minimal pairs, a seed of their own, no sentence of the
  other files), and lm_eval/ (tasks tiny_lm_val_pairs and tiny_lm_val_heldout).
  `--validation` writes it alone.
Text is normalized to one paragraph per line, paragraphs separated by a blank
line, so the training text looks like the held-out text.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import random
import re
import struct
import tarfile
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEB_SHA256 = "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95"
RDATA = "./usr/lib/R/site-library/janeaustenr/data/Rdata"
NOVELS = {
    "emma": "Emma",
    "mansfieldpark": "Mansfield Park",
    "northangerabbey": "Northanger Abbey",
    "persuasion": "Persuasion",
    "prideprejudice": "Pride and Prejudice",
    "sensesensibility": "Sense and Sensibility",
}
TRAIN = ("emma", "prideprejudice", "sensesensibility")
VALID = ("northangerabbey", 15)
HELDOUT = ("persuasion", 8)
PAIR_SOURCES = ("persuasion", "mansfieldpark")
PAIRS_PER_PHENOMENON = 125
SEED = 20240611
VALIDATION = ("northangerabbey", 16, 8)
"""The validation split's novel, its first chapter (after the agent's), and how many
chapters its perplexity text takes."""
VALIDATION_SEED = SEED + 1

# --- reading the Debian package ---------------------------------------------------------


def _ar_members(data: bytes) -> Iterator[tuple[str, bytes]]:
    """The members of an `ar` archive (a .deb is one)."""
    if not data.startswith(b"!<arch>\n"):
        raise ValueError("not a .deb (ar) archive")
    pos = 8
    while pos < len(data):
        header = data[pos : pos + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        yield name, data[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size % 2)


def _deb_file(deb: Path, member: str) -> bytes:
    for name, payload in _ar_members(deb.read_bytes()):
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(payload)) as tar:
                extracted = tar.extractfile(member)
                if extracted is None:
                    raise ValueError(f"{member} is not a file in {deb}")
                return extracted.read()
    raise ValueError(f"{deb} has no data.tar member")


def _r_strings(blob: bytes) -> list[str]:
    """Deserialize one R character vector (XDR format 2 or 3)."""
    if blob[:2] != b"X\n":
        raise ValueError("not an XDR-serialized R object")
    version = struct.unpack(">i", blob[2:6])[0]
    pos = 14
    if version == 3:
        (enc_len,) = struct.unpack(">i", blob[pos : pos + 4])
        pos += 4 + enc_len
    flags, count = struct.unpack(">ii", blob[pos : pos + 8])
    pos += 8
    if flags & 0xFF != 16:
        raise ValueError(f"expected a character vector, got SEXP type {flags & 0xFF}")
    out: list[str] = []
    for _ in range(count):
        _, length = struct.unpack(">ii", blob[pos : pos + 8])
        pos += 8
        if length == -1:
            out.append("")
            continue
        out.append(blob[pos : pos + length].decode("utf-8"))
        pos += length
    return out


def read_novels(deb: Path) -> dict[str, list[str]]:
    """Each novel's lines, as the R package's `austen_books()` data holds them."""
    digest = hashlib.sha256(deb.read_bytes()).hexdigest()
    if digest != DEB_SHA256:
        raise SystemExit(f"{deb}: sha256 {digest} is not the recorded {DEB_SHA256}")
    index = gzip.decompress(_deb_file(deb, RDATA + ".rdx"))
    db = _deb_file(deb, RDATA + ".rdb")
    # The index is a named list whose first element ("variables") maps each object
    # to (offset, length) in the .rdb; objects appear in alphabetical order.
    start = index.index(b"\x00\x00\x02\x13\x00\x00\x00\x06") + 8
    novels: dict[str, list[str]] = {}
    for i, key in enumerate(sorted(NOVELS)):
        entry = index[start + 16 * i : start + 16 * (i + 1)]
        if entry[:8] != b"\x00\x00\x00\r\x00\x00\x00\x02":
            raise ValueError("unexpected lazy-load index layout")
        offset, length = struct.unpack(">ii", entry[8:16])
        chunk = db[offset : offset + length]
        novels[key] = _r_strings(zlib.decompress(chunk[4:]))
    return novels


# --- normalizing the text ---------------------------------------------------------------

CHAPTER = re.compile(r"^(chapter|volume)\s+[0-9ivxlc]+\.?$", re.IGNORECASE)


def chapters(lines: list[str]) -> list[list[str]]:
    """Chapters as lists of paragraphs (front matter and headings dropped)."""
    result: list[list[str]] = []
    current: list[str] | None = None
    para: list[str] = []

    def flush() -> None:
        if para and current is not None:
            current.append(" ".join(w.strip() for w in para))
        para.clear()

    for raw in lines:
        line = raw.strip()
        if CHAPTER.match(line):
            flush()
            if line.lower().startswith("chapter"):
                current = []
                result.append(current)
            continue
        if not line:
            flush()
        else:
            para.append(line)
    flush()
    cleaned = []
    for chap in result:
        paras = [re.sub(r"\s+", " ", p).strip() for p in chap]
        paras = [p for p in paras if p and p.upper() not in {"FINIS", "THE END"}]
        if paras:
            cleaned.append(paras)
    return cleaned


def as_text(chaps: list[list[str]]) -> str:
    return "\n\n".join("\n\n".join(c) for c in chaps) + "\n"


# --- minimal pairs ----------------------------------------------------------------------

WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?")
ABBREV = ("Mr", "Mrs", "Dr", "St", "Col", "Capt")


def sentences(chaps: list[list[str]], title: str) -> list[tuple[str, str]]:
    """Plain narrative sentences (source, sentence) fit for a minimal pair."""
    out: list[tuple[str, str]] = []
    for number, chap in enumerate(chaps, start=1):
        for para in chap:
            for sent in re.split(r"(?<=[.!?])\s+(?=[A-Z])", para):
                sent = sent.strip()
                if any(sent.endswith(a + ".") for a in ABBREV):
                    continue
                if re.search(r"[\"_\d\[\]()]|--|(?<![A-Za-z])'|'(?![a-z])", sent):
                    continue  # dialogue, italics, numbers, asides: keep the pairs clean
                n_words = len(WORD.findall(sent))
                if 6 <= n_words <= 35 and sent[0].isupper() and sent[-1] in ".!?":
                    out.append((f"{title}, chapter {number}", sent))
    return out


def _match_case(new: str, old: str) -> str:
    return new[0].upper() + new[1:] if old[0].isupper() else new


Site = tuple[int, int, str]  # start, end, replacement
Corruption = Callable[[str, list[re.Match[str]]], list[Site]]


def _pairs_of(words: list[re.Match[str]]) -> Iterator[tuple[int, re.Match[str], re.Match[str]]]:
    for i in range(len(words) - 1):
        yield i, words[i], words[i + 1]


def _adjacent(sent: str, a: re.Match[str], b: re.Match[str]) -> bool:
    return sent[a.end() : b.start()] == " "


SUBJUNCTIVE_CUES = {"if", "wish", "wished", "though", "unless", "whether", "suppose", "as", "were"}
BE_HAVE_FLIP = {
    "was": "were",
    "were": "was",
    "is": "are",
    "are": "is",
    "has": "have",
    "have": "has",
}
NOT_A_SUBJECT = {
    # Pronouns make agreement a bigram (too easy); the rest are not subjects, are
    # existentials, or take either number (collectives, quantifiers).
    "he",
    "she",
    "it",
    "they",
    "we",
    "you",
    "i",
    "there",
    "here",
    "to",
    "not",
    "never",
    "would",
    "could",
    "should",
    "might",
    "must",
    "will",
    "shall",
    "can",
    "may",
    "cannot",
    "do",
    "did",
    "does",
    "ever",
    "nor",
    "and",
    "or",
    "but",
    "if",
    "as",
    "than",
    "what",
    "family",
    "party",
    "couple",
    "company",
    "set",
    "number",
    "rest",
    "whole",
    "none",
    "all",
    "each",
    "every",
    "any",
    "some",
    "most",
    "both",
    "neither",
    "either",
    "people",
    "so",
    "only",
    "also",
    "always",
    "then",
    "now",
    "still",
    "just",
    "once",
    "indeed",
}


def subject_verb_agreement(sent: str, words: list[re.Match[str]]) -> list[Site]:
    """A be/have verb of the wrong number after a noun or relative subject.

    'Lady Russell was' -> 'Lady Russell were', 'the gardens which are' -> 'which is'.
    Pronoun subjects are left out: there the error is a bigram any model learns.
    """
    sites = []
    for i, prev, verb in _pairs_of(words):
        new = BE_HAVE_FLIP.get(verb.group().lower())
        if new is None or sent[prev.end() : verb.start()] not in {" ", ", "}:
            continue
        if prev.group().lower() in NOT_A_SUBJECT:
            continue
        before = {w.group().lower() for w in words[max(0, i - 6) : i + 1]}
        if before & SUBJUNCTIVE_CUES and "were" in {new, verb.group().lower()}:
            continue  # 'if the weather were fine' is grammatical
        sites.append((verb.start(), verb.end(), new))
    return sites


REFLEXIVES = {
    "himself": "herself",
    "herself": "himself",
    "themselves": "himself",
    "itself": "himself",
}
FEMALE = {
    "she",
    "her",
    "hers",
    "miss",
    "mrs",
    "lady",
    "anne",
    "mary",
    "elizabeth",
    "fanny",
    "louisa",
    "henrietta",
    "julia",
    "maria",
    "susan",
    "penelope",
    "sophia",
    "mother",
    "sister",
    "daughter",
    "aunt",
    "woman",
    "women",
    "girl",
    "wife",
    "niece",
}
MALE = {
    "he",
    "him",
    "his",
    "sir",
    "mr",
    "captain",
    "admiral",
    "charles",
    "frederick",
    "walter",
    "william",
    "edmund",
    "henry",
    "tom",
    "thomas",
    "father",
    "brother",
    "son",
    "uncle",
    "man",
    "men",
    "gentleman",
    "husband",
    "nephew",
    "wentworth",
    "harville",
    "benwick",
}


def anaphor_agreement(sent: str, words: list[re.Match[str]]) -> list[Site]:
    """A reflexive that does not match its antecedent: 'She told herself' -> 'She told himself'.

    Only where the sentence itself shows the antecedent (a pronoun, name or title of
    the right gender before the reflexive) and nothing in it could license the
    corrupted form. The antecedent can be far back: more than local statistics.
    """
    lower = [w.group().lower() for w in words]
    sites = []
    for i, w in enumerate(words):
        new = REFLEXIVES.get(lower[i])
        if new is None or set(lower) & ({"herself": FEMALE, "himself": MALE}.get(new, set())):
            continue
        own = {"himself": MALE, "herself": FEMALE}.get(lower[i])
        if own is not None and not set(lower[:i]) & own:
            continue
        sites.append((w.start(), w.end(), _match_case(new, w.group())))
    return sites


NOT_BEFORE_WHO = {
    "of",
    "to",
    "with",
    "for",
    "by",
    "from",
    "know",
    "knew",
    "known",
    "ask",
    "asked",
    "wonder",
    "wondered",
    "see",
    "saw",
    "seen",
    "tell",
    "told",
    "as",
    "than",
    "and",
    "or",
    "but",
    "those",
    "one",
    "any",
    "all",
    "whom",
    "no",
    "guess",
    "doubt",
    "whether",
    "learn",
    "say",
    "said",
    "understand",
    "decide",
    "determine",
    "consider",
    "question",
    "inquire",
    "enquire",
    "which",
    "who",
    "what",
    "family",
    "party",
    "company",
    "people",
    "world",
}


def relative_pronoun(sent: str, words: list[re.Match[str]]) -> list[Site]:
    """A relative pronoun of the wrong animacy: 'Anne, who was' -> 'Anne, which was'."""
    sites = []
    for i, prev, rel in _pairs_of(words):
        if i + 2 >= len(words) or sent[prev.end() : rel.start()] not in {" ", ", "}:
            continue
        lp, lr, nxt = prev.group().lower(), rel.group().lower(), words[i + 2].group().lower()
        if lp in NOT_BEFORE_WHO or lp in FUNCTION:
            continue
        if lr == "who" and nxt in FINITE:
            sites.append((rel.start(), rel.end(), "which"))
        elif lr == "which" and nxt in FINITE and prev.group().islower():
            sites.append((rel.start(), rel.end(), "who"))
    return sites


CORRELATIVES = {"neither": ("nor", "or"), "either": ("or", "nor"), "both": ("and", "or")}
COMPARATIVES = {
    "more",
    "less",
    "rather",
    "better",
    "worse",
    "sooner",
    "fewer",
    "greater",
    "larger",
    "smaller",
    "older",
    "younger",
    "higher",
    "lower",
    "stronger",
    "longer",
    "later",
    "earlier",
    "happier",
    "easier",
    "other",
    "otherwise",
}


def correlative_forms(sent: str, words: list[re.Match[str]]) -> list[Site]:
    """The wrong half of a two-part construction.

    'neither ... nor' -> 'neither ... or', 'both ... and' -> 'both ... or',
    'more ... than' -> 'more ... as', 'as ... as' -> 'as ... than'.
    """
    sites = []
    lower = [w.group().lower() for w in words]
    for i, word in enumerate(lower):
        if word in CORRELATIVES:
            second, wrong = CORRELATIVES[word]
            for j in range(i + 2, min(len(lower), i + 12)):
                if lower[j] == second:
                    sites.append((words[j].start(), words[j].end(), wrong))
                    break
        elif word == "than" and set(lower[max(0, i - 5) : i]) & COMPARATIVES:
            sites.append((words[i].start(), words[i].end(), "as"))
        elif word == "as" and i + 2 < len(lower) and lower[i + 2] == "as" and i + 3 < len(lower):
            if lower[i + 1] not in FUNCTION and (i == 0 or lower[i - 1] != "as"):
                sites.append((words[i + 2].start(), words[i + 2].end(), "than"))
    return sites


DETERMINERS = {"this": "these", "these": "this", "those": "that", "many": "much"}
NOT_AFTER_DET = {"of", "who", "which", "whom", "that", "a", "an", "more", "others", "other"}


def determiner_noun_agreement(sent: str, words: list[re.Match[str]]) -> list[Site]:
    """A determiner of the wrong number: 'these ladies' -> 'this ladies'."""
    sites = []
    for _, det, nxt in _pairs_of(words):
        new = DETERMINERS.get(det.group().lower())
        if new is None or not _adjacent(sent, det, nxt) or nxt.group().lower() in NOT_AFTER_DET:
            continue
        sites.append((det.start(), det.end(), _match_case(new, det.group())))
    return sites


FINITE = {
    "was",
    "were",
    "had",
    "could",
    "would",
    "should",
    "might",
    "must",
    "will",
    "shall",
    "did",
    "said",
    "thought",
    "felt",
    "knew",
    "saw",
    "is",
    "are",
    "has",
    "have",
    "am",
    "can",
    "may",
    "went",
    "came",
    "found",
    "began",
}
PARTICIPLE_TO_PAST = {
    "seen": "saw",
    "done": "did",
    "gone": "went",
    "given": "gave",
    "taken": "took",
    "written": "wrote",
    "spoken": "spoke",
    "known": "knew",
    "chosen": "chose",
    "fallen": "fell",
    "driven": "drove",
    "grown": "grew",
    "thrown": "threw",
    "risen": "rose",
    "shaken": "shook",
    "mistaken": "mistook",
    "forgiven": "forgave",
    "undertaken": "undertook",
    "begun": "began",
    "drawn": "drew",
    "forbidden": "forbade",
    "hidden": "hid",
}
AUXILIARIES = {"have", "has", "had", "having", "was", "were", "be", "been", "is", "are", "being"}


def past_participle(sent: str, words: list[re.Match[str]]) -> list[Site]:
    """A simple past where a participle belongs: 'had seen' -> 'had saw'."""
    sites = []
    for i, aux, nxt in _pairs_of(words):
        if aux.group().lower() not in AUXILIARIES or not _adjacent(sent, aux, nxt):
            continue
        verb = nxt
        if nxt.group().lower() in {"not", "never", "already", "just"} and i + 2 < len(words):
            verb = words[i + 2]
            if not _adjacent(sent, nxt, verb):
                continue
        new = PARTICIPLE_TO_PAST.get(verb.group().lower())
        if new is not None:
            sites.append((verb.start(), verb.end(), new))
    return sites


SWAP_FIRST = {"the", "a", "an", "his", "her", "their", "my", "your", "our", "its", "every"}
FUNCTION = SWAP_FIRST | {
    "of",
    "to",
    "and",
    "in",
    "that",
    "was",
    "be",
    "it",
    "he",
    "she",
    "they",
    "not",
    "as",
    "with",
    "for",
    "at",
    "by",
    "on",
    "is",
    "had",
    "have",
    "i",
    "you",
    "but",
    "or",
    "so",
}


def word_order(sent: str, words: list[re.Match[str]]) -> list[Site]:
    """A determiner swapped with the word after it: 'the house' -> 'house the'."""
    sites = []
    for _, det, nxt in _pairs_of(words):
        if det.group().lower() not in SWAP_FIRST or not _adjacent(sent, det, nxt):
            continue
        if nxt.group().lower() in FUNCTION or not nxt.group().islower():
            continue
        first = nxt.group() if det.start() > 0 else _match_case(nxt.group(), det.group())
        second = det.group() if det.start() > 0 else det.group().lower()
        sites.append((det.start(), nxt.end(), f"{first} {second}"))
    return sites


PHENOMENA: dict[str, Corruption] = {
    "anaphor_agreement": anaphor_agreement,
    "correlative_forms": correlative_forms,
    "determiner_noun_agreement": determiner_noun_agreement,
    "past_participle": past_participle,
    "relative_pronoun": relative_pronoun,
    "subject_verb_agreement": subject_verb_agreement,
    "word_order": word_order,
}


def minimal_pairs(
    sents: list[tuple[str, str]], seed: int = SEED
) -> dict[str, list[dict[str, object]]]:
    """Up to PAIRS_PER_PHENOMENON pairs per phenomenon, each sentence used once.

    Rarer phenomena pick first so that common ones do not use up their sentences.
    The good sentence's position among the two choices alternates, so that a model
    (or tokenizer) that cannot tell them apart scores exactly chance, not 100%.
    """
    rng = random.Random(seed)
    candidates: dict[str, list[tuple[int, Site]]] = {}
    for name, corrupt in PHENOMENA.items():
        found = []
        for index, (_, sent) in enumerate(sents):
            sites = corrupt(sent, list(WORD.finditer(sent)))
            if sites:
                found.append((index, rng.choice(sites)))
        candidates[name] = found
    used: set[int] = set()
    result: dict[str, list[dict[str, object]]] = {}
    for name in sorted(candidates, key=lambda n: (len(candidates[n]), n)):
        pool = list(candidates[name])
        rng.shuffle(pool)
        chosen = []
        for index, (start, end, new) in pool:
            if index in used:
                continue
            used.add(index)
            chosen.append((index, start, end, new))
            if len(chosen) == PAIRS_PER_PHENOMENON:
                break
        rows = []
        for k, (index, start, end, new) in enumerate(sorted(chosen)):
            source, good = sents[index]
            bad = good[:start] + new + good[end:]
            assert bad != good
            label = k % 2
            choices = [good, bad] if label == 0 else [bad, good]
            rows.append(
                {
                    "sentence_good": good,
                    "sentence_bad": bad,
                    "choices": choices,
                    "label": label,
                    "phenomenon": name,
                    "source": source,
                }
            )
        result[name] = rows
    return result


# --- writing ----------------------------------------------------------------------------


def write_jsonl(path: Path, rows: Sequence[Mapping[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def write_task_yamls(
    folder: Path,
    phenomena: list[str],
    *,
    group: str = "tiny_lm_pairs",
    data: str = "../data/pairs",
    source: str = "Persuasion, Mansfield Park",
) -> None:
    """One lm-eval task per phenomenon (data files relative to the YAML) and their group."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob(f"{group}_*.yaml"):
        old.unlink()
    for name in phenomena:
        (folder / f"{group}_{name}.yaml").write_text(
            "include: _pairs_template_yaml\n"
            f"task: {group}_{name}\n"
            "dataset_kwargs:\n"
            "  data_files:\n"
            f"    validation: {data}/{name}.jsonl\n"
        )
    tasks = "".join(f"  - {group}_{name}\n" for name in phenomena)
    (folder / f"_{group}.yaml").write_text(
        f"# Grammatical minimal pairs built from held-out text ({source});\n"
        "# the group's acc is the accuracy over all pairs (each phenomenon weighted by its size).\n"
        "# Written by build_data.py.\n"
        f"group: {group}\n"
        f"task:\n{tasks}"
        "aggregate_metric_list:\n"
        "  - metric: acc\n"
        "    aggregation: mean\n"
        "    weight_by_size: true\n"
        "metadata:\n"
        "  version: 1.0\n"
    )


def build_validation(novels: dict[str, list[list[str]]], root: Path) -> None:
    """The validation split: text from chapters no other file holds, pairs drawn with a
    seed of their own, none of whose sentences appears in the agent's or the test's text."""
    name, first, n_docs = VALIDATION
    chaps = novels[name][first - 1 :]
    out = root / "hidden" / "validation"
    docs = [
        {"text": "\n\n".join(c), "source": f"{NOVELS[name]}, chapter {i}"}
        for i, c in enumerate(chaps[:n_docs], start=first)
    ]
    write_jsonl(out / "heldout.jsonl", docs)
    elsewhere = (root / "starter" / "data" / "train.txt").read_text(encoding="utf-8")
    elsewhere += (root / "starter" / "data" / "valid.txt").read_text(encoding="utf-8")
    for path in sorted((root / "hidden" / "data").rglob("*.jsonl")):
        elsewhere += path.read_text(encoding="utf-8")
    sents = [
        (f"{NOVELS[name]}, chapter {int(source.rsplit(' ', 1)[1]) + first - 1}", sent)
        for source, sent in sentences(chaps, NOVELS[name])
        if sent not in elsewhere
    ]
    pairs = minimal_pairs(sents, seed=VALIDATION_SEED)
    for old in (out / "pairs").glob("*.jsonl"):
        old.unlink()
    for phenomenon, rows in pairs.items():
        write_jsonl(out / "pairs" / f"{phenomenon}.jsonl", rows)
    lm_eval = out / "lm_eval"
    lm_eval.mkdir(parents=True, exist_ok=True)
    template = (HERE / "hidden" / "lm_eval" / "_pairs_template_yaml").read_text()
    (lm_eval / "_pairs_template_yaml").write_text(template)
    write_task_yamls(
        lm_eval,
        sorted(pairs),
        group="tiny_lm_val_pairs",
        data="../pairs",
        source=f"{NOVELS[name]}, chapters {first} on: the validation split",
    )
    heldout = (HERE / "hidden" / "lm_eval" / "tiny_lm_heldout.yaml").read_text()
    heldout = heldout.replace("task: tiny_lm_heldout", "task: tiny_lm_val_heldout")
    heldout = heldout.replace("../data/heldout.jsonl", "../heldout.jsonl")
    heldout = re.sub(
        r"^# Perplexity on held-out text \([^)]*\)",
        f"# The validation split's perplexity ({NOVELS[name]}, chapters {first}-{first + n_docs - 1})",
        heldout,
    )
    (lm_eval / "tiny_lm_val_heldout.yaml").write_text(heldout)
    print("validation pairs:", {k: len(v) for k, v in pairs.items()})


def build(deb: Path, root: Path) -> None:
    novels = {k: chapters(v) for k, v in read_novels(deb).items()}
    starter = root / "starter" / "data"
    hidden = root / "hidden" / "data"
    starter.mkdir(parents=True, exist_ok=True)
    train = "\n".join(as_text(novels[k]) for k in TRAIN)
    (starter / "train.txt").write_text(train, encoding="utf-8")
    name, n_valid = VALID
    (starter / "valid.txt").write_text(as_text(novels[name][:n_valid]), encoding="utf-8")
    name, n_held = HELDOUT
    docs = [
        {"text": "\n\n".join(c), "source": f"{NOVELS[name]}, chapter {i}"}
        for i, c in enumerate(novels[name][:n_held], start=1)
    ]
    write_jsonl(hidden / "heldout.jsonl", docs)
    pairs = minimal_pairs([s for k in PAIR_SOURCES for s in sentences(novels[k], NOVELS[k])])
    for phenomenon, rows in pairs.items():
        write_jsonl(hidden / "pairs" / f"{phenomenon}.jsonl", rows)
    write_task_yamls(root / "hidden" / "lm_eval", sorted(pairs))
    for path in sorted([*starter.iterdir(), *hidden.rglob("*.jsonl")]):
        print(f"{path.relative_to(root)}: {path.stat().st_size:,} bytes")
    print("pairs:", {k: len(v) for k, v in pairs.items()}, "total", sum(map(len, pairs.values())))
    build_validation(novels, root)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument(
        "--deb", type=Path, required=True, help="r-cran-janeaustenr_1.0.0-1_all.deb"
    )
    parser.add_argument("--out", type=Path, default=HERE, help="task folder to write into")
    parser.add_argument(
        "--validation", action="store_true", help="write the validation split alone"
    )
    args = parser.parse_args()
    if args.validation:
        build_validation({k: chapters(v) for k, v in read_novels(args.deb).items()}, args.out)
    else:
        build(args.deb, args.out)


if __name__ == "__main__":
    main()

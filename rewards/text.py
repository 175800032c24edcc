"""Answer-text normalisation and string metrics shared by the benchmark scorers.

Each normaliser follows the official evaluation code of its benchmark (read, not copied): the SQuAD-style
normaliser of InfoSeek, the VQA-style preprocessing of Encyclopedic-VQA, and ANLS for MMLongBench-Doc.
"""

from __future__ import annotations

import re
import string
from collections import Counter

_SQUAD_PUNCTUATION = frozenset(string.punctuation)
_SQUAD_ARTICLES = re.compile(r"\b(a|an|the)\b")

# E-VQA also strips typographic quotes, the acute accent, the backtick and the underscore.
_EVQA_PUNCTUATION = frozenset(string.punctuation + "\u2018\u2019\u00b4`_")
_EVQA_ARTICLES = re.compile(r"\b(the answer is|a|an|the)\b")
_EVQA_LLM_PREFIX = "<extra_id_0> "
# E-VQA maps number words 0-10 and NLI labels to one spelling. Its contraction map is not reproduced:
# it is applied after punctuation removal to both sides alike, so it never changes whether they are equal.
_EVQA_WORD_MAP = {
    "none": "0",
    "zero": "0",
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
    "entailment": "yes",
    "true": "yes",
    "contradiction": "no",
    "false": "no",
}

# Markup a policy could smuggle into an answer to confuse a scorer: the action tags and any HTML-like tag.
_MARKUP = re.compile(r"</?\s*[A-Za-z_][\w:-]*(\s[^<>]*)?/?>")


def normalize_squad(text: str) -> str:
    """Lower-case, drop ASCII punctuation and English articles, collapse whitespace (InfoSeek, generic).

    >>> normalize_squad("The  Eiffel-Tower!")
    'eiffeltower'
    """
    return " ".join(_SQUAD_ARTICLES.sub(" ", _without_punctuation(text)).split())


def squad_match(prediction: str, reference: str) -> bool:
    """Normalised exact match (``normalize_squad``). A reference that normalises to nothing ("A", "The") is
    compared with its articles kept, so an answer of only punctuation or articles, or the empty forced answer,
    does not match it; a reference with nothing left even then matches nothing (docs/rewards.md).

    >>> squad_match("the Louvre.", "Louvre"), squad_match("a", "A"), squad_match(".", "A"), squad_match("", "The")
    (True, True, False, False)
    """
    ref = normalize_squad(reference)
    if ref:
        return normalize_squad(prediction) == ref
    kept = " ".join(_without_punctuation(reference).split())
    return bool(kept) and " ".join(_without_punctuation(prediction).split()) == kept


def _without_punctuation(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch not in _SQUAD_PUNCTUATION)


def normalize_evqa(text: str) -> str:
    """Encyclopedic-VQA answer preprocessing: lower-case, strip punctuation and articles, map number words.

    >>> normalize_evqa("The answer is Three")
    '3'
    """
    text = text.lower().replace("\n", " ").replace("\t", " ").strip()
    if text.startswith(_EVQA_LLM_PREFIX):
        text = text.replace(_EVQA_LLM_PREFIX, "")
    text = "".join(ch for ch in text if ch not in _EVQA_PUNCTUATION)
    text = _EVQA_ARTICLES.sub(" ", text)
    return " ".join(_EVQA_WORD_MAP.get(word, word) for word in text.split())


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD token F1 between two answers after ``normalize_squad``.

    >>> token_f1("the red fox", "red fox jumps")
    0.8
    """
    pred, ref = normalize_squad(prediction).split(), normalize_squad(reference).split()
    if not pred or not ref:
        return float(squad_match(prediction, reference))
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insertions, deletions, substitutions of one character each).

    >>> levenshtein("kitten", "sitting")
    3
    """
    if len(a) > len(b):
        a, b = b, a
    previous = list(range(len(a) + 1))
    for i, cb in enumerate(b, start=1):
        current = [i]
        for j, ca in enumerate(a, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def anls(reference: str, prediction: str, threshold: float) -> float:
    """Average normalised Levenshtein similarity of one pair, zero at or below ``threshold``.

    The distance is over the strings as given; the length that normalises it is that of their upper-case
    forms, as the official scorers compute it (MMLongBench-Doc's ``anls_compute``, from DocVQA's):
    ``max(len(gt.upper()), len(pred.upper()))``. Python's ``upper`` lengthens ``ß`` ("SS") and ligatures
    (``ﬁ`` -> "FI"), so a string holding them normalises by more characters than it has.

    >>> anls("paris", "pari", 0.5)
    0.8
    >>> anls("paris", "london", 0.5)
    0.0
    >>> round(anls("fußball", "fussbal", 0.5), 3)  # distance 3, length len("FUSSBALL") = 8, not 7
    0.625
    """
    length = max(len(reference.upper()), len(prediction.upper()))
    if length == 0:
        return 1.0
    # The length gap alone bounds the distance from below: skip the quadratic DP on hopeless pairs
    # (a very long prediction against a short reference).
    if 1.0 - abs(len(reference) - len(prediction)) / length <= threshold:
        return 0.0
    similarity = 1.0 - levenshtein(reference, prediction) / length
    return similarity if similarity > threshold else 0.0


def has_markup(text: str) -> bool:
    """True when ``text`` contains a tag such as ``</answer>`` or ``<b>``.

    >>> has_markup("Paris</answer><answer>London"), has_markup("< 5 km")
    (True, False)
    """
    return _MARKUP.search(text) is not None

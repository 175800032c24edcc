"""Names, attribute passages and questions for the synthetic KB (answers always need a passage fact)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_SYLLABLES = (
    "var mel tor qui sen dal bra fen lor gav hul ist kor mun pel ras tiv uld wen zar "
    "cal dor eth fir gol han jor kel lum nor ost pra rin sol tam ur vel yor zen"
).split()
_NOUNS = ("Spire", "Chapel", "Moth", "Falcon", "Orchid", "Bridge", "Beetle", "Lighthouse", "Fern", "Tower")
_VARIANTS = (
    "Amber Basalt Cobalt Dune Ember Flint Garnet Hazel Indigo Jade Kestrel Linden Marble Nickel Onyx Pewter "
    "Quartz Russet Saffron Topaz Umber Violet Willow Xenon Yarrow Zinc Alder Birch Cedar Drift Ebony Frost "
    "Granite Heather Ivory Juniper Kelp Lichen Maple Nettle Ochre Pine Quill Rowan Slate Thistle Umbra "
    "Vesper Wren Yew Zephyr Aspen Bramble Coral Dusk Elm Fawn Gale Holly Iris"
).split()
_REGIONS = (
    "Aldmoor Brenvale Corrin Dunhollow Eastmarch Farrow Glenmere Harrowdale Isenport Jorvik Kessmoor".split()
)
_SURNAMES = (
    "Abbot Bellamy Carrow Dunmore Ellery Fairweather Goodwin Hartley Ingram Jessop Kimber Lowell".split()
)
_FILLER = (
    "Observers often confuse it with its close relatives, which share most of its outline and colouring. ",
    "Small markings near one corner are the most reliable way to tell it apart from similar specimens. ",
    "It is listed in several regional registers and appears in a number of travel accounts. ",
    "Later surveys added notes on its condition, surroundings and the seasons in which it is best seen. ",
)


@dataclass(frozen=True)
class EntityText:
    """The textual side of one entity: its name and the attributes its passage states."""

    name: str
    noun: str
    family: str
    year: int
    region: str
    cataloguer: str


def family_names(rng: np.random.Generator, num_families: int) -> list[str]:
    """Distinct two- or three-syllable family names."""
    names: list[str] = []
    seen: set[str] = set()
    while len(names) < num_families:
        size = 2 if len(seen) < 600 else 3  # 40^2 two-syllable names, then longer ones
        name = "".join(rng.choice(_SYLLABLES, size=size)).capitalize()
        if name not in seen:
            seen.add(name)
            names.append(name)
    return names


def entity_texts(rng: np.random.Generator, family_of: np.ndarray, variant_of: np.ndarray) -> list[EntityText]:
    """Name and attributes of every entity; names are unique (variant word + family name + noun)."""
    num_families = int(family_of.max()) + 1
    if int(variant_of.max()) >= len(_VARIANTS):
        raise ValueError(
            f"family size {int(variant_of.max()) + 1} exceeds the {len(_VARIANTS)} variant words"
        )
    families = family_names(rng, num_families)
    nouns = rng.choice(_NOUNS, size=num_families)
    years = rng.integers(1650, 2020, size=len(family_of))
    regions = rng.integers(len(_REGIONS), size=len(family_of))
    cataloguers = rng.integers(len(_SURNAMES), size=len(family_of))
    return [
        EntityText(
            name=f"{_VARIANTS[v]} {families[f]} {nouns[f]}",
            noun=str(nouns[f]),
            family=families[f],
            year=int(years[i]),
            region=_REGIONS[regions[i]],
            cataloguer=_SURNAMES[cataloguers[i]],
        )
        for i, (f, v) in enumerate(zip(family_of, variant_of, strict=True))
    ]


PASSAGE_FORMS = ("prose", "slots")
"""How a passage states its facts (``Preset.passage_form``)."""


def passage(entity: EntityText, rng: np.random.Generator, max_chars: int = 800, form: str = "prose") -> str:
    """The entity's encyclopedic passage: the facts questions ask about, padded with look-alike filler (``prose``),
    or the facts alone in one fixed order, the region last (``slots``: ``demo_slots``, meant as an answer a small
    policy copies from the confirmed entity's passage).

    Both forms draw the filler, so a KB's questions and gold entities do not depend on the form.

    >>> e = EntityText("Jade Varmel Moth", "Moth", "Varmel", 1732, "Aldmoor", "Hartley")
    >>> passage(e, np.random.default_rng(0), form="slots")
    'Jade Varmel Moth: a moth of the Varmel group, first recorded in 1732, catalogued by Hartley, found in the region of Aldmoor.'
    """
    if form not in PASSAGE_FORMS:
        raise ValueError(f"passage form must be one of {PASSAGE_FORMS}, got {form!r}")
    filler = "".join(rng.permutation(_FILLER)[: int(rng.integers(1, len(_FILLER) + 1))])
    if form == "slots":
        # One short sentence whose last value is the region: the answer is then the last word of the SearchText
        # observation, a fixed number of tokens before the policy's answer (names and values are single tokens).
        return (
            f"{entity.name}: a {entity.noun.lower()} of the {entity.family} group, first recorded in "
            f"{entity.year}, catalogued by {entity.cataloguer}, found in the region of {entity.region}."
        )
    facts = (
        f"{entity.name} is a {entity.noun.lower()} of the {entity.family} group. "
        f"It was first recorded in {entity.year} and is found in the region of {entity.region}. "
        f"The {entity.name} was catalogued by {entity.cataloguer}. "
    )
    return (facts + filler)[:max_chars].rstrip()


QUESTION_ATTRIBUTES = ("year", "region", "who")
"""The attributes a single-image question can ask (``Preset.question_attributes``)."""


def single_question(
    entity: EntityText, rng: np.random.Generator, attributes: tuple[str, ...] = QUESTION_ATTRIBUTES
) -> tuple[str, list[str]]:
    """A question about the entity in one image, naming the attribute it asks, and its answer aliases.

    One draw of three picks the attribute, ``attributes[draw % len(attributes)]`` (uniform for one or three of
    them), whatever ``attributes`` are: a KB's later draws (its questions' entities) do not depend on them.

    >>> e = EntityText("Jade Varmel Moth", "Moth", "Varmel", 1732, "Aldmoor", "Hartley")
    >>> single_question(e, np.random.default_rng(0), ("year",))
    ('In which year was the moth in the image first recorded?', ['1732'])
    """
    if not attributes or set(attributes) - set(QUESTION_ATTRIBUTES):
        raise ValueError(f"question attributes must be some of {QUESTION_ATTRIBUTES}, got {attributes!r}")
    noun = entity.noun.lower()
    draw = int(rng.integers(3))
    kind = attributes[draw % len(attributes)]
    if kind == "year":
        return f"In which year was the {noun} in the image first recorded?", [str(entity.year)]
    if kind == "region":
        return f"In which region is the {noun} in the image found?", [entity.region]
    return f"Who catalogued the {noun} in the image?", [entity.cataloguer]


def comparison_question(first: EntityText, second: EntityText) -> tuple[str, list[str]]:
    """A two-image comparison question (needs both entities and both passage facts)."""
    earlier = first if first.year < second.year else second
    return "Which of the two entities shown was first recorded earlier? Answer with its name.", [earlier.name]

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


def passage(entity: EntityText, rng: np.random.Generator, max_chars: int = 800) -> str:
    """The entity's encyclopedic passage: the facts questions ask about, padded with look-alike filler."""
    facts = (
        f"{entity.name} is a {entity.noun.lower()} of the {entity.family} group. "
        f"It was first recorded in {entity.year} and is found in the region of {entity.region}. "
        f"The {entity.name} was catalogued by {entity.cataloguer}. "
    )
    filler = "".join(rng.permutation(_FILLER)[: int(rng.integers(1, len(_FILLER) + 1))])
    return (facts + filler)[:max_chars].rstrip()


def single_question(entity: EntityText, rng: np.random.Generator) -> tuple[str, list[str]]:
    """A question about the entity in one image and its answer aliases."""
    noun = entity.noun.lower()
    kind = int(rng.integers(3))
    if kind == 0:
        return f"In which year was the {noun} in the image first recorded?", [str(entity.year)]
    if kind == 1:
        return f"In which region is the {noun} in the image found?", [entity.region]
    return f"Who catalogued the {noun} in the image?", [entity.cataloguer]


def comparison_question(first: EntityText, second: EntityText) -> tuple[str, list[str]]:
    """A two-image comparison question (needs both entities and both passage facts)."""
    earlier = first if first.year < second.year else second
    return "Which of the two entities shown was first recorded earlier? Answer with its name.", [earlier.name]

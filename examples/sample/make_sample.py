"""Writes the small English-German sample that the quick-start job runs on.

Every pair is composed here from a hand-written lexicon (no corpus text): a subject, a
verb with a compatible object, and a place, with German articles inflected by gender and
case; a few lines hold two sentences, so that multi-root lines are exercised. Deterministic:
rerunning rewrites identical files.

    python examples/sample/make_sample.py examples/sample
"""

import itertools
import os
import random
import sys

# (English, German nominative, plural?)
SUBJECTS = [
    ("A man", "Ein Mann", False), ("A woman", "Eine Frau", False), ("A child", "Ein Kind", False),
    ("A young man", "Ein junger Mann", False), ("An old woman", "Eine alte Frau", False),
    ("A small dog", "Ein kleiner Hund", False), ("A boy", "Ein Junge", False), ("A girl", "Ein Mädchen", False),
    ("Two men", "Zwei Männer", True), ("Three children", "Drei Kinder", True), ("Two women", "Zwei Frauen", True),
]
# objects: English, German accusative
OBJECTS = {
    "ball": ("a red ball", "einen roten Ball"), "bike": ("a bike", "ein Fahrrad"),
    "book": ("a book", "ein Buch"), "guitar": ("a guitar", "eine Gitarre"),
    "hat": ("a blue hat", "einen blauen Hut"), "picture": ("a picture", "ein Bild"),
    "letter": ("a letter", "einen Brief"), "coffee": ("a cup of coffee", "eine Tasse Kaffee"),
    "newspaper": ("a newspaper", "eine Zeitung"), "kite": ("a kite", "einen Drachen"),
}
# English (sg, pl), German (sg, pl), compatible objects
VERBS = [
    (("is holding", "are holding"), ("hält", "halten"), ["ball", "book", "guitar", "hat", "picture", "letter", "coffee", "kite"]),
    (("is carrying", "are carrying"), ("trägt", "tragen"), ["ball", "bike", "book", "guitar", "picture", "newspaper"]),
    (("is reading", "are reading"), ("liest", "lesen"), ["book", "letter", "newspaper"]),
    (("is playing", "are playing"), ("spielt", "spielen"), ["guitar"]),
    (("is throwing", "are throwing"), ("wirft", "werfen"), ["ball", "hat"]),
    (("is buying", "are buying"), ("kauft", "kaufen"), ["bike", "book", "hat", "newspaper", "coffee", "kite"]),
    (("is painting", "are painting"), ("malt", "malen"), ["picture"]),
    (("is flying", "are flying"), ("lässt", "lassen"), ["kite"]),
]
PLACES = [
    ("in the park", "im Park"), ("on the street", "auf der Straße"), ("at the beach", "am Strand"),
    ("in the kitchen", "in der Küche"), ("near the river", "in der Nähe des Flusses"),
    ("in front of a building", "vor einem Gebäude"), ("in the garden", "im Garten"),
]
FOLLOW_UPS = [
    ("It is sunny .", "Es ist sonnig ."), ("The weather is cold .", "Das Wetter ist kalt ."),
    ("Everyone is smiling .", "Alle lächeln ."), ("It is late .", "Es ist spät ."),
]


def pairs():
    for (en_s, de_s, plural), (en_v, de_v, objects), (en_p, de_p) in itertools.product(SUBJECTS, VERBS, PLACES):
        for obj in objects:
            en_o, de_o = OBJECTS[obj]
            verb_en, verb_de = en_v[plural], de_v[plural]
            if obj == "kite" and verb_de in ("lässt", "lassen"):
                de = f"{de_s} {verb_de} {de_o} {de_p} steigen ."
            else:
                de = f"{de_s} {verb_de} {de_o} {de_p} ."
            yield f"{en_s} {verb_en} {en_o} {en_p} .", de


def main(out_dir: str) -> None:
    rng = random.Random(13)
    everything = list(pairs())
    rng.shuffle(everything)
    chosen = everything[:1100]
    for i in range(0, len(chosen), 17):  # every 17th line holds two sentences
        en, de = chosen[i]
        en_f, de_f = FOLLOW_UPS[i % len(FOLLOW_UPS)]
        chosen[i] = (f"{en} {en_f}", f"{de} {de_f}")
    splits = {"train": chosen[:900], "valid": chosen[900:1000], "test": chosen[1000:1100]}
    os.makedirs(out_dir, exist_ok=True)
    for split, lines in splits.items():
        for side, lang in ((0, "en"), (1, "de")):
            with open(os.path.join(out_dir, f"{split}.{lang}"), "w", encoding="utf-8") as handle:
                # raw text, as a user would have it: detokenized punctuation
                handle.writelines(pair[side].replace(" .", ".") + "\n" for pair in lines)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))

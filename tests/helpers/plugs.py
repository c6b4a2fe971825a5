"""Shared settings of the tests over an OpenAI-compatible embeddings server (tests/embed,
tests/mcpserver, tests/query/test_front_doors.py): the key the fake server receives and a tiny corpus."""

from __future__ import annotations

KEY_ENV = "ARBORAG_TEST_EMBED_KEY"
SECRET = "sk-embed-TOPSECRET-cli-0123456789"

_TOPICS = {
    "cinder.txt": ("Cinderella", ["lost a glass slipper at the palace ball", "ran home before the clock struck midnight",
                                  "was helped by her fairy godmother", "rode to the ball in a pumpkin coach",
                                  "married the prince who searched the kingdom with the glass slipper",
                                  "forgave her stepsisters who had mocked her rags"]),
    "orbit.txt": ("The Jupiter probe", ["entered orbit after a long cruise through the asteroid belt",
                                        "mapped the storms of the great red spot with its cameras",
                                        "measured the magnetic field of the giant planet", "flew past the icy moon Europa",
                                        "fired its engine in short burns to adjust the orbit",
                                        "sent its data home through the deep space antennas"]),
    "bread.txt": ("Sourdough bread", ["rises with wild yeast and lactic bacteria", "needs a starter fed with flour and water",
                                      "ferments slowly overnight in a cool kitchen", "gets its crust from a very hot oven",
                                      "tastes sour because of lactic acid", "keeps fresh for days wrapped in linen"]),
}


def _doc(subject: str, facts: list[str]) -> str:
    """Paragraphs of a few sentences each: several leaf chunks per document."""
    paras = []
    for i, fact in enumerate(facts):
        paras.append(f"{subject} {fact}. " + " ".join(f"In part {i}.{j} of the story, {subject.lower()} {fact} once more, "
                                                      f"as witness number {j} recalled." for j in range(4)))
    return "\n\n".join(paras)


DOCS = {name: _doc(subject, facts) for name, (subject, facts) in _TOPICS.items()}

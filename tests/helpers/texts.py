"""Texts shared by the segmentation tests."""

# hard-wrapped prose with a split word ("conti-\nnued"): its reading view differs from its text
WRAPPED = (
    "The lighthouse keeper climbed the stairs every evening before the sun went down over the\n"
    "harbour, carrying a can of oil and a cloth for the great lens that turned above the rocks\n"
    "and the fishing boats. He had done this for thirty years without missing a single night, even\n"
    "when the storms of November tore the slates from the roof of his cottage by the conti-\n"
    "nued force of the wind.\n"
)

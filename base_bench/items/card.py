"""The fixed numbers of the BananaMind Base Bench 1.1 card, in one place.

Everything here is copied from the card (see the project README); nothing is computed. Other
modules import these tables rather than repeating them.
"""

VERSION = "1.1"
HUB_DATASET = "BananaMind/BananaMind-Base-Bench-1.1"
HUB_DATA_FILE = "data/test.jsonl"
OFFICIAL_SHA256 = "2f563bb46df778ca494fa20f994a8d3045d4c51fbbffeee433764e2813abea21"

# category name -> (category weight, {difficulty: item Elo})
CATEGORIES = {
    "language_completion": (1.00, {"easy": 750, "medium": 850, "hard": 1000}),
    "commonsense": (1.10, {"easy": 800, "medium": 900, "hard": 1050}),
    "world_knowledge": (1.10, {"easy": 800, "medium": 900, "hard": 1050}),
    "context_tracking": (1.20, {"easy": 850, "medium": 950, "hard": 1100}),
    "quantitative": (1.30, {"easy": 900, "medium": 1000, "hard": 1150}),
    "logical_reasoning": (1.35, {"easy": 950, "medium": 1050, "hard": 1200}),
    "code_completion": (1.40, {"easy": 950, "medium": 1050, "hard": 1200}),
}
DIFFICULTY_WEIGHTS = {"easy": 1.00, "medium": 1.50, "hard": 2.25}

ITEMS_PER_CATEGORY = 50
DIFFICULTY_COUNTS = {"easy": 117, "medium": 117, "hard": 116}
LABEL_COUNTS = (88, 88, 87, 87)
N_CHOICES = 4
TOTAL_ITEMS = 350

SCORE_MODE = "mean_logprob"
PRIOR_RATING = 1000.0
PRIOR_WEIGHT = 4.0
ELO_SCALE = 400.0

# Not on the card, but part of what an official run is: the most a served or batched engine's
# log-probs may move with what else is computed, in nats per token (--max-spread raises it, and the
# run is then not official).
SPREAD_MAX = 1e-3


def category_weight(category: str) -> float:
    return CATEGORIES[category][0]


def item_elo(category: str, difficulty: str) -> int:
    return CATEGORIES[category][1][difficulty]

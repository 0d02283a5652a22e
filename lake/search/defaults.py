"""Search's default values and option types, in one light module.

The JSON contract (pipeline.contract) and the Python client (turnlake) name these defaults
without importing the search engine (numpy, pyarrow, tantivy), so they are defined here and
the engine's modules import them.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["DEFAULT_COVERAGE_GAIN", "DEFAULT_K", "DEFAULT_MIN_RELEVANCE",
           "DEFAULT_NEIGHBOUR_WEIGHT", "DEFAULT_SEARCH_ROLES", "DEFAULT_TIME_WEIGHT",
           "FusionMethod"]

# lake.search.coverage: each lexical match votes with the square of this many times its share.
DEFAULT_COVERAGE_GAIN = 2.0
# lake.search.fusion: the RRF k of search (FusionSettings.k defaults to this).
DEFAULT_K = 60
FusionMethod = Literal["rrf", "rrf_score"]
# lake.search.named_time: turns in a time the query names rank up to 1 + this many times higher.
DEFAULT_TIME_WEIGHT = 4.0
# lake.search.neighbours: chosen on the LoCoMo tune split (see that module's docstring).
DEFAULT_NEIGHBOUR_WEIGHT = 0.5
# lake.search.relevance: the floor fitted by bench/relevance.py.
DEFAULT_MIN_RELEVANCE = 0.5
# lake.tables.ROLES less "note": the roles a search reads unless told otherwise.
DEFAULT_SEARCH_ROLES = ("user", "assistant", "summary", "anchor", "attachment")

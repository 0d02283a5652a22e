"""Tables drawn with a meaning in their colours (pandas Stylers, which st.dataframe shows)."""

from __future__ import annotations

from typing import Any

import polars as pl

# A pale background per index state that needs attention; fresh rows stay plain.
STATE_BACKGROUNDS = {"stale": "#fff3bf", "missing": "#ffe3e3", "orphan": "#e9ecef"}


def health_table(frame: pl.DataFrame) -> Any:
    """The index health table with stale, missing and orphan partitions' rows highlighted;
    empty cells shown as "-" (never "None")."""
    table = frame.to_pandas()

    def shade(row: Any) -> list[str]:
        colour = STATE_BACKGROUNDS.get(str(row["state"]))
        return [f"background-color: {colour}" if colour else ""] * len(row)

    return table.style.apply(shade, axis=1).format(na_rep="-")

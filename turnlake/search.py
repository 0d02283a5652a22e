"""How the adapters present a search hit: its address and the text a model reads."""

from __future__ import annotations

from typing import Any

from lake.search.request import Hit


def turn_address(hit: Hit) -> str:
    """``CONVERSATION/TURN``: what ``Client.turn`` and ``Client.pull`` take."""
    return f"{hit.conversation_id}/{hit.turn_id}"


def hit_text(hit: Hit) -> str:
    """The exchange a hit found, as a model should read it: what the user asked and what the
    agent answered (the best matching text when the search left out snippets)."""
    parts = [f"{label}: {hit.snippets[side]}" for side, label in (("user", "User"),
                                                                   ("assistant", "Assistant"))
             if hit.snippets.get(side)]
    return "\n".join(parts) or hit.text


def hit_metadata(hit: Hit) -> dict[str, Any]:
    """The hit's place, time and relevance, JSON-ready."""
    return {"address": turn_address(hit), "conversation_id": hit.conversation_id,
            "turn_id": hit.turn_id, "user_id": hit.user_id, "tenant": hit.tenant,
            "turn_at": hit.turn_at.isoformat(), "role": hit.role, "matched_text": hit.text,
            "relevance": hit.relevance}

"""Print the OpenAPI document of ``turnlake serve`` as JSON, built by the app factory.

The app is built over an empty temporary lake and never started: building it reads no
model and writes nothing, so the document is exactly what a server publishes at
``/openapi.json``. Run by ``npm run types`` (and ``make ts-types``).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path


def main() -> None:
    # Offline and model-free: the document does not depend on the embedder.
    os.environ.setdefault("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from lake.settings import Settings
    from pipeline.service.app import create_app

    with tempfile.TemporaryDirectory(prefix="turnlake-openapi-") as folder:
        app = create_app(Settings.from_env(str(Path(folder) / "lake")), embed=False,
                         index=False)
        document = app.openapi()
    json.dump(document, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

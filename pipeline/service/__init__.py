"""``turnlake serve``: the HTTP API over one search service and one identity boundary.

Routes are thin adapters (one router per resource) over lake/ — the search service, the
catalog, the materializer, erasure — and the group-commit writer; the principal of every
request comes from its API key (``lake.keys``) through one dependency.
"""

from pipeline.service.app import create_app
from pipeline.service.auth import principal_for_key

__all__ = ["create_app", "principal_for_key"]

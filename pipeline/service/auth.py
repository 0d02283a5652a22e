"""Authentication: the principal of a request comes from its bearer key alone.

``principal_for_key`` is the one check, for any adapter (HTTP routes, the MCP server);
``Caller`` is the FastAPI dependency the routes declare.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from lake.keys import KeyPrincipal, KeyStore
from lake.search.access import Principal
from pipeline.service.context import context_of

_bearer = HTTPBearer(auto_error=False, description="An API key from `turnlake keys create`.")


def principal_for_key(keys: KeyStore, key: str | None) -> KeyPrincipal:
    """The principal of an API key; Unauthenticated when there is none or it is refused."""
    return keys.authenticate(key)


def caller(request: Request, credentials: Annotated[
        HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> KeyPrincipal:
    """The FastAPI dependency: the request's key principal (401 without a valid key)."""
    return principal_for_key(context_of(request).keys,
                             credentials.credentials if credentials else None)


Caller = Annotated[KeyPrincipal, Depends(caller)]


def reader(key: Caller) -> Principal:
    """The dependency of read routes: the search/catalog principal of a key that may read."""
    return key.reader()


def recorder(key: Caller) -> KeyPrincipal:
    """The dependency of recording routes: a key that may record."""
    key.require("record")
    return key


def eraser(key: Caller) -> KeyPrincipal:
    """The dependency of erasing routes: a key that may erase (admin)."""
    key.require("erase")
    return key


Reader = Annotated[Principal, Depends(reader)]
Recorder = Annotated[KeyPrincipal, Depends(recorder)]
Eraser = Annotated[KeyPrincipal, Depends(eraser)]

"""The two-worker Dask cluster on 127.0.0.1 that the distributed test modules start once
each (a module-scoped ``client`` fixture): worker processes (``processes=True``, as a
real cluster runs), or threads of this process where a module only needs the protocol.
Starts are bounded: a worker process not up within ``death_timeout``, or a client not
connected within ``timeout``, is an error, not a wait without end."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def local_client(distributed: Any, processes: bool = True) -> Iterator[Any]:
    """A client of a new two-worker ``LocalCluster`` (``distributed`` is the module, which
    the callers import with ``pytest.importorskip``), closed with its cluster on exit."""
    options: dict[str, Any] = {"death_timeout": 120} if processes else {"protocol": "tcp"}
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=processes, host="127.0.0.1", dashboard_address=None, **options
    )
    c = distributed.Client(cluster, timeout=120)
    try:
        yield c
    finally:
        c.close()
        cluster.close()

"""The pool fixtures (a real etcd on loopback, a controller and gpud nodes) shared with tests/integration/pool."""

from tests.integration.pool.conftest import etcd, pool  # noqa: F401 - pytest fixtures re-exported for this folder

"""The pool: many gpud nodes as one, on etcd.

NOTE [pool keys]: everything the pool knows lives in etcd under one prefix (``/wooly/pool/`` by default):

- ``nodes/<node>``: ``Inventory`` (endpoint, devices, tenants, sessions, load, dedup sample), under the node's lease;
- ``ledger/<node>``: ``Ledger``, the node's reservations, under the node's lease;
- ``cordon/<node>``: ``Cordon``, an operator took the node out of placement (until uncordoned);
- ``drain/<node>``: the node is being drained (NOTE [drain] in woolyhv/pool/drain.py);
- ``moves/<node>/<session>``: ``MoveOrder``, a session of a draining node goes to another node;
- ``quota/<tenant>``: ``{"bytes": N}``, the tenant's memory across the pool;
- ``tenant/<tenant>``: a counter every reservation of a tenant with a quota bumps (the quota's compare-and-swap);
- ``leader``: ``{"id", "endpoint"}`` of the controller that places, under its lease;
- ``controllers/<id>``: every live controller, under its lease;
- beside the prefix, ``/wooly/pool-decisions/<id>``: placement decisions (NOTE [placement]) under a decision
  lease of an hour, outside the range the controllers watch.

Nodes (woolyhv/pool/agent.py) write their own inventory and claim/release in their ledger; controllers
(woolyhv/pool/controller.py) hold no state beside etcd: they watch the prefix, place from that view, and reserve
with one transaction that compares the node's ledger revision (and the tenant counter, when the tenant has a pool
quota), so two controllers can never promise the same bytes twice. Clients (woolyhv/pool/client.py) only talk to
a controller, then to their node: no data flows through the controller, and no client needs etcd.
"""

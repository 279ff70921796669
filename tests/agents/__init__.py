"""Tests of the node agent (``agents/``): no server, a local HTTP receiver where needed."""

"""The ragym retrieval service: one ASGI app over every retriever of a KB, batched, cached, and its client.

- ``config``: the service's frozen config (batching, cache, auth, bind address).
- ``wire``: how queries and hits travel as JSON (vectors as base64 float32).
- ``cache`` / ``batcher``: the replay cache and the dynamic batcher in front of each retriever.
- ``app``: the ASGI app (search, batch_search, health, ready); ``serve``: ``ragym serve``.
- ``client``: the env's retriever over HTTP with timeouts, retries and a circuit breaker.
- ``shards``: an index split into shards (index files + id maps) merged by score.
- ``catalog``: which retrievers a KB folder serves.
- ``ray_serve``: the same app as a Ray Serve deployment with replicas.
"""

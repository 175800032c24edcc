"""The ragym retrieval service: one ASGI app over named retrievers, batched, cached, and its client.

- ``config``: the service's frozen config (batching, cache, auth, bind address).
- ``wire``: how queries and hits travel as JSON (vectors as base64 float32).
- ``cache`` / ``batcher``: the replay cache and the dynamic batcher in front of each retriever.
- ``app``: the ASGI app (search, batch_search, health, ready).
- ``client``: the env's retriever over HTTP with timeouts, retries and a circuit breaker.
- ``shards``: an index split into shards (index files + id maps) merged by score.

What an env's data becomes as served retrievers, ``ragym serve`` and the Ray Serve deployment are
``ragym.envs.serving`` (the service knows no env).
"""

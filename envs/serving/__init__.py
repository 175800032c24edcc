"""Serving env data through the retrieval service: which retrievers a KB-VQA knowledge base, DocMemo's document
stores and shard manifests become (``catalog``), ``ragym serve`` (``cli``) and the Ray Serve deployment
(``ray_serve``). The service itself (app, batching, cache, client, wire format, shards) is
``ragym.envs.retrieval.service``, which knows no env."""

"""HTTP/1.1 on asyncio protocols and httptools: the one stack the gateway and the bench share.

* Server (the gateway's): `listener.GatewayServer` listens and holds the limits;
  `server.GatewayProtocol` is one connection (pipelining, keep-alive, hostile clients) on
  `request_reader.RequestReader` (httptools' request parser and the limits on what is read);
  `exchange.Exchange` one request and its response as ASGI;
  `chunk_writer.ChunkWriter` the writer the routes stream through (head held until the first
  body bytes); `eager.start_eagerly` runs a handler from the callback that read its request.
* Client: `reader.ResponseReader`, the one httptools response reader; on it the gateway's
  engine connections (`upstream.UpstreamPool`, bytes relayed as they come) and the bench's
  timed connections (`client.StreamPool`, httpx's transport seam: a raw request in, its
  response handed to a `Receiver` with each read's arrival time), over plain TCP or with the
  kernel's receive timestamps (`kernel_ts`). `sse` frames a streamed body into events.
  The server's own refusals (400, 408, 431, 503, a failed handler's 500) use the OpenAI error
  body of every answer of ours, `inhouse.openai_errors.error_json` (shared, no shell).

Imports run one way: the gateway and the bench import this package; it imports neither of
them, nor the engine server (`lint-imports` holds it).
"""

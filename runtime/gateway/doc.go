// Package gateway puts one OpenAI-compatible endpoint in front of a changing set of serving replicas (phones
// behind tunnels, or local `phonellm serve` processes).
//
// Routing is prefix-affine (Options.Affinity, route.go): a chat or completion request is keyed by the client's
// prompt_cache_key (OpenAI's field; at most MaxCacheKeyBytes, else 400), else by its leading system and
// developer messages (the rubric every request of one task shares), else by the first KeyBytes of its prompt,
// and goes to a replica that holds that key's prefix in its cache. When every holder is busy, the request waits
// for one unless a miss on a free replica is expected to finish first; the expectation comes from what the
// replicas report (prompt tokens, cached tokens, prompt evaluation time: usage.prompt_tokens_details and
// llama-server's timings, in answers and streams) and from the gateway's own timing, so briefly queueing for
// the prefix wins whenever a miss costs more than the queue. Unkeyed requests, and any request sent with
// "Phonellm-Routing: load", are routed least-outstanding-requests within each replica's free slots (the
// lowest in-flight/slots ratio wins). A replica marked down (a request could not reach it, or a probe failed)
// holds no key from then on: its keys go to live replicas, at the latest one HealthInterval after it died. A
// replica with S slots gets at most S requests at once from the gateway.
// When a request must wait, it waits in a bounded FIFO queue (QueueSize, QueueTimeout) and then gets 429 with
// Retry-After. Slots come from the replica's configuration, else from its GET /health ("slots", or
// "slots_idle" + "slots_processing"), else from "phonellm_slots_total" on its /metrics, else 1. Per replica,
// /metrics and Replicas() report the cache hits and misses, prompt and cached tokens (the token hit rate), the
// moving averages of prompt evaluation for hits and misses and of queue waits, and the routing decisions.
//
// Health: every replica is probed with GET /health (HealthInterval, HealthTimeout); only replicas whose last
// probe succeeded receive requests. A request that fails on a replica before the first response byte
// (connection refused or reset, a 5xx or a 429) is retried on another replica, up to MaxAttempts; the request
// body is buffered (at most MaxBodyBytes) so it can be replayed. Non-streaming responses are read whole (at
// most MaxBufferedResponse) before anything reaches the client, so a replica dying mid-body is still retried;
// Server-Sent Events are passed through unbuffered, flushed event by event, and never retried once a byte
// was sent. A client that disconnects cancels the upstream request.
//
// Circuit breaking: FailureThreshold consecutive failures (transport errors and 5xx) eject a replica for
// EjectBase, doubling per consecutive ejection up to EjectMax. After the ejection a fresh health probe must
// succeed before it serves again, and one more failure ejects it again at once.
//
// The gateway serves /v1/* (proxied), GET /v1/models (the union of the models the live replicas list, each
// as id, object, created and owned_by only), GET /health (200 while at least one replica is live, with summed
// slots so gateways can be stacked) and GET /metrics (Prometheus text: gateway totals and per-replica gauges,
// counters and latency histograms). Client API keys are Bearer tokens compared in constant time; several may
// be valid at once.
//
// It faces strangers: request bodies grow with the bytes that arrive (never from Content-Length) within
// MaxBodyBytes and a budget shared by all requests (BodyBudget); every client (API key, or address when there
// are no keys, IPv6 by /64) has a token bucket (RateLimit, RateBurst; 429 with Retry-After), kept in a
// bounded LRU (MaxClients); Serve adds internal/httpx's header, body, idle and per-write timeouts, header size
// cap and connection cap.
package gateway

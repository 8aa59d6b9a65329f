// Package httpx holds the HTTP helpers every tree shares, each exactly once:
//
//   - for servers facing strangers (runtime/api, runtime/gateway): Serve with header, body, idle and per-write
//     timeouts, a header size cap and a connection cap (LimitListener); ReadBody, which grows with what
//     arrives and draws from a process-wide Budget instead of trusting Content-Length; API keys compared in
//     constant time (Keys) and read from the environment failing closed (APIKeyFromEnv); OpenAI's error shape
//     (Error, WriteError); the Prometheus histogram and text-format helpers; StatusWriter for metrics;
//   - for clients carrying credentials (the Hub clients in pipeline/hfhub and pipeline/publish): SameOrigin
//     and the redirect policy CheckRedirect, which drops Authorization once a redirect leaves the origin;
//     CapText, which makes a remote party's error text safe to print on one line.
package httpx

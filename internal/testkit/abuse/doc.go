// Package abuse attacks a server the way issue 14 did, for the serve and gateway abuse tests: 50 concurrent
// clients (chats, streams abandoned after the first event, completions), slowloris headers and bodies, huge
// Content-Length with a tiny body, 100,000 messages, 15 MiB words and special-token floods, all at once,
// while a dedicated goroutine probes GET /health on fresh connections and fails on starvation. Attacks are
// bounded by a hang guard, never by a speed expectation, so the tests pass on a loaded machine.
//
// It is test support: only _test.go files import it.
package abuse

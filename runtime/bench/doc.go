// Package bench measures a runtime.Engine the way `phonellm bench` reports
// it: prompt processing and generation rates at given prompt lengths,
// aggregate generation at concurrency levels, the fleet figure (requests per
// hour for a 7,000-token-in, 8-token-out request, the fraud-review shape) and
// the prefix-cache effect (two requests sharing most of their prompt).
// Result is JSON-tagged; WriteTable renders it for people.
package bench

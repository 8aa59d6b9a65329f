//go:build race

package gateway

// raceEnabled: the race detector multiplies memory use, so peak-RSS bounds do not apply.
const raceEnabled = true

//go:build !unix

package publish

import "time"

// cpuTime is not measured on this platform; cpu-s/GiB reads 0.
func cpuTime() time.Duration { return 0 }

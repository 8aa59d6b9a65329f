//go:build unix

package merge

import (
	"fmt"
	"math"
	"os"

	"github.com/phonellm/phonellm/internal/fsx"
	"golang.org/x/sys/unix"
)

// mmapFile maps a whole file read-only.
func mmapFile(path string) ([]byte, error) {
	f, err := fsx.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() <= 0 || fi.Size() > math.MaxInt {
		return nil, fmt.Errorf("merge: cannot map %s (%d bytes)", path, fi.Size())
	}
	return unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
}

func munmap(b []byte) { unix.Munmap(b) }

// dropPages unmaps the pages covering [off, end) of a map (the page cache keeps the data). Pages shared
// with a neighbouring range are dropped too: its reader, if any, just faults them in again.
func dropPages(data []byte, off, end int64) {
	ps := int64(os.Getpagesize())
	a := max(off, 0) / ps * ps
	e := min((end+ps-1)/ps*ps, int64(len(data)))
	if a < e {
		unix.Madvise(data[a:e], unix.MADV_DONTNEED)
	}
}

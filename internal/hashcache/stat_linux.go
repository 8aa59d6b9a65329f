package hashcache

import (
	"os"
	"syscall"
)

func identity(fi os.FileInfo) (Identity, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Identity{}, false
	}
	return Identity{Size: fi.Size(), MtimeNs: st.Mtim.Nano(), CtimeNs: st.Ctim.Nano(), Inode: st.Ino, Device: uint64(st.Dev)}, true
}

//go:build unix

package guest

import (
	"io/fs"
	"syscall"
)

func keyOf(fi fs.FileInfo) statKey {
	k := statKey{size: fi.Size(), mtime: fi.ModTime(), mode: fi.Mode()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		k.ino = st.Ino
		k.ctime = ctimeNS(st)
	}
	return k
}

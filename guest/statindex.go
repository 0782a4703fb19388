package guest

import (
	"io/fs"
	"os"
	"time"
)

// statKey is what a file's stat must still say for it to count as unchanged.
// mtime and ctime both move on any write (ctime even when mtime is set back by
// hand), and inode and size catch replacement by rename.
type statKey struct {
	size  int64
	mtime time.Time
	ctime int64
	ino   uint64
	mode  fs.FileMode
}

// statIndex maps workspace-relative paths of regular files to their stat as of
// the baseline, taken at built.
type statIndex struct {
	built time.Time
	files map[string]statKey
}

// racyWindow: timestamps move in coarse kernel ticks, so a file written within
// this long before the index was taken could be written again without its stat
// changing. Such entries are always compared by content (git's "racy" rule).
const racyWindow = time.Second

// buildStatIndex stats every regular file beneath root by name, through
// root's fd (never a dirent's Info, which looks the path up from the top).
func buildStatIndex(root *os.Root) (statIndex, error) {
	idx := statIndex{built: time.Now(), files: map[string]statKey{}}
	err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := root.Lstat(p)
		if err != nil {
			return err
		}
		idx.files[p] = keyOf(fi)
		return nil
	})
	return idx, err
}

func (idx statIndex) unchanged(rel string, fi fs.FileInfo) bool {
	k, ok := idx.files[rel]
	return ok && k == keyOf(fi) && k.mtime.Before(idx.built.Add(-racyWindow))
}

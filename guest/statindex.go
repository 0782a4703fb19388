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

// buildStatIndex stats every regular file beneath root, each by its name
// beneath its dir's fd (os.Root), never by a path from the top.
func buildStatIndex(root *os.Root) (statIndex, error) {
	idx := statIndex{built: time.Now(), files: map[string]statKey{}}
	var walk func(dir *os.Root, rel string) error
	walk = func(dir *os.Root, rel string) error {
		ents, err := fs.ReadDir(dir.FS(), ".")
		if err != nil {
			return err
		}
		for _, e := range ents {
			p := join(rel, e.Name())
			switch {
			case e.Type().IsRegular():
				fi, err := dir.Lstat(e.Name())
				if err != nil {
					return err
				}
				idx.files[p] = keyOf(fi)
			case e.IsDir():
				sub, err := dir.OpenRoot(e.Name())
				if err != nil {
					return err
				}
				err = walk(sub, p)
				sub.Close()
				if err != nil {
					return err
				}
			}
		}
		return nil
	}
	return idx, walk(root, "")
}

func (idx statIndex) unchanged(rel string, fi fs.FileInfo) bool {
	k, ok := idx.files[rel]
	return ok && k == keyOf(fi) && k.mtime.Before(idx.built.Add(-racyWindow))
}

// Package durable owns writing a small file so that a crash leaves either
// its old content or its new content, never part of one: the journal of a
// commit and the record of a parked session both rely on it.
package durable

import (
	"os"
	"path/filepath"
)

// WriteFile replaces path with b: a temporary file beside it (path+".tmp",
// mode 0600) written and fsynced, renamed over path, then the directory
// fsynced so that the rename itself survives a crash. On failure the
// temporary file is removed and path is as it was.
func WriteFile(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = SyncDir(filepath.Dir(path))
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// SyncDir fsyncs dir, which makes the names created, renamed or removed in
// it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

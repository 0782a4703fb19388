// Package commit owns applying a trial's file changes to the host: exactly the
// bytes that were reviewed (read from the trial's blob store and re-hashed), only
// if the host still looks as it did when the trial started, never through a
// symlink, and all-or-nothing even across a crash.
//
// An apply goes through states recorded in a journal file (fsynced) before the
// host is touched:
//
//	planned   the journal lists every step and every temp/backup name it will use
//	staged    new contents sit in temp files beside their targets (inodes recorded)
//	applied   every step is done; only backups of the old state remain to delete
//
// Steps only rename within a directory (old → backup name, temp → target, or an
// atomic RENAME_EXCHANGE), mkdir, chmod and chown, so each one can be undone by
// looking at the names and inodes the journal holds. Recover, run before any other
// store operation, rolls a planned or staged journal back, and an applied one
// forward. The host is therefore either fully old or fully new.
package commit
